// Package dns01 builds the DNS provider of an ACME dns01 solver in the hub,
// with cert-manager's own provider packages (rfc2136, route53, cloudDNS,
// azureDNS, akamai, cloudflare, digitalocean, acmeDNS) and its webhook
// solver client, from cert-manager's configuration fields.
//
// Contract: New(ctx, Env, dns01) returns a Provider (Present and CleanUp
// of one TXT value) or a *ConfigError. Credentials are read from Secrets in
// Env.Namespace (the hub's) only; a solver naming none uses the hub's own
// cloud identity only when Env.Ambient allows it (cert-manager's
// --cluster-issuer-ambient-credentials). No error it or a provider returns
// carries a credential it read: they are replaced by "[redacted]". Which
// solver serves a name, and whether the hub runs it at all, is
// internal/acme's decision.
package dns01
