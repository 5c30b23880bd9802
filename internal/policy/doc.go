// Package policy decides, before anything is signed, whether a downstream
// Certificate may be issued by the hub: the IssuancePolicy resources
// (certhub.io/v1alpha1, cluster-scoped, made for Git) say which cluster,
// namespace and issuer may get which names, key, duration and CA powers.
//
// The rule is cert-manager approver-policy's: a certificate is allowed when at
// least one policy that selects it allows everything it holds; what a policy
// does not list is not allowed by it. With no policy selecting it, the
// Engine's Default decides (allow or deny) — except for a CA a hub CA would
// sign, which only a policy can allow (allow lets a SelfSigned issuer sign
// one: Decision.SelfSignedOnly, decided with ForIssuer on the signer), and
// an extended key usage cert-manager has no name for. What is judged is the x509 template that will be signed
// (issuers.Template), read attribute by attribute and SAN by SAN, never the
// Certificate's fields: a literalSubject's second CN is as visible as its first.
//
//	Certificate (cluster, labels, namespace, issuerRef) + template to sign
//	   ──▶ policies that select it (cluster names/labels, namespaces, issuerRef)
//	          none ──▶ Default (allow | deny); a CA only if self-signed
//	   ──▶ first, by name, that allows all of it ──▶ Allowed; Decision.Constrain
//	          gives a CA that policy's maxPathLen and x509 name constraints
//	   ──▶ none allows ──▶ Denied: field, value, and each policy considered
//
// Policies are keyed by what the hub knows of a cluster (its name and the
// labels of its Argo CD cluster Secret), never by anything a downstream admin
// controls (namespace labels are not selectable for that reason).
//
// Contract:
//   - Compile turns IssuancePolicy objects into a Set; a policy with an
//     invalid pattern, CIDR or selector still selects every Certificate but
//     allows nothing, so a typo can only deny, never widen.
//   - Set.Evaluate is pure and safe for concurrent use; it builds the
//     template from the Certificate when the Request carries none.
//   - Callers sign exactly the template they passed, after Decision.Constrain,
//     and only after Decision.ForIssuer allows the signer they resolved.
//   - {{cluster}} and {{namespace}} stand only for DNS labels; any other
//     name matches no pattern that holds them (UnsafeClusterName).
//   - Engine (SetupWithManager) keeps the Set current from the hub's
//     IssuancePolicies and calls its subscribers after every change, so
//     denied Certificates are re-evaluated without a restart.
package policy
