package inventory

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The identity the hub uses in a downstream cluster (kustomize/downstream
// holds the same objects as YAML; test/manifests keeps the two equal).
const (
	// DownstreamNamespace holds the hub's ServiceAccount in each downstream cluster.
	DownstreamNamespace = "certhub-system"
	// DownstreamServiceAccount is the identity the hub uses downstream.
	DownstreamServiceAccount = "certhub-hub"
	// DownstreamClusterRole (or, for namespaced registrations, Role) is the least privilege the hub needs downstream.
	DownstreamClusterRole = "certhub-downstream"
)

// DownstreamRules is what the hub's credentials may do in a downstream
// cluster, and why:
//   - certificates get/list/watch: the work list; create/update/delete: the
//     Certificates of annotated Ingresses and Gateways (internal/shim; it
//     deletes only those an Ingress or Gateway controls);
//   - certificates/status get/update/patch: Ready, notAfter, renewalTime, revision;
//   - issuers get: namespaced Issuers (SelfSigned/CA) resolve downstream;
//   - certificaterequests get/list/watch: the requests the hub signs
//     (internal/crsign); delete: the requests a Certificate taken over from
//     cert-manager leaves (internal/certsync); certificaterequests/status
//     get/update/patch: the signed certificate and conditions;
//   - secrets get/list/watch/create/update/patch: the TLS Secrets (cached only
//     when labelled certhub.io/managed-by), keystore passwords, CA key pairs
//     of namespaced CA Issuers; never delete;
//   - events create/patch/update: issuance Events on Certificates;
//   - ingresses, gateways get/list/watch: read by the shims;
//   - namespaces get/list/watch, configmaps get/list/watch/create/update/delete:
//     the trust bundle ConfigMaps (internal/trust; it deletes only its own,
//     labelled certhub.io/trust-bundle).
func DownstreamRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"issuers"}, Verbs: []string{"get"}},
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"gateway.networking.k8s.io"}, Resources: []string{"gateways"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		// cert-manager's leader-election Lease: is it still running here (internal/writegate)?
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}, ResourceNames: []string{"cert-manager-controller"}},
	}
}

// GrantAccess creates, idempotently, the hub's ServiceAccount in
// DownstreamNamespace and its RBAC: a ClusterRole and binding, or with
// namespaces a Role and RoleBinding in each of them only.
func GrantAccess(ctx context.Context, c client.Client, namespaces []string) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DownstreamNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DownstreamServiceAccount, Namespace: DownstreamNamespace}},
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: DownstreamServiceAccount, Namespace: DownstreamNamespace}}
	if len(namespaces) == 0 {
		objs = append(objs,
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DownstreamClusterRole}, Rules: DownstreamRules()},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: DownstreamClusterRole},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DownstreamClusterRole}, Subjects: subject})
	}
	for _, ns := range namespaces {
		objs = append(objs,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: DownstreamClusterRole, Namespace: ns}, Rules: DownstreamRules()},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: DownstreamClusterRole, Namespace: ns},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: DownstreamClusterRole}, Subjects: subject})
	}
	for _, o := range objs {
		if err := client.IgnoreAlreadyExists(c.Create(ctx, o)); err != nil {
			return fmt.Errorf("failed to create %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// MintToken returns a token of the hub's ServiceAccount from the TokenRequest
// API, valid for lifetime (the API server may shorten it).
func MintToken(ctx context.Context, cs kubernetes.Interface, lifetime time.Duration) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(DownstreamNamespace).CreateToken(ctx, DownstreamServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(lifetime / time.Second))}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to create a token for %s/%s: %w", DownstreamNamespace, DownstreamServiceAccount, err)
	}
	return tr.Status.Token, nil
}
