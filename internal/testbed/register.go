package testbed

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
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/certhub/certhub/internal/inventory"
)

// Names of the objects Register creates in a downstream cluster (see inventory.GrantAccess).
const (
	DownstreamNamespace      = inventory.DownstreamNamespace
	DownstreamServiceAccount = inventory.DownstreamServiceAccount
	DownstreamClusterRole    = inventory.DownstreamClusterRole
	// tokenLifetime is long enough for any test or demo run.
	tokenLifetime = 24 * 60 * 60
)

// Register creates certhub's ServiceAccount and RBAC in cp, mints a token and
// creates cp's Argo CD cluster Secret in the hub's Argo namespace.
// It returns the Secret as written.
func (b *Bed) Register(ctx context.Context, cp *ControlPlane) (*corev1.Secret, error) {
	return b.RegisterAs(ctx, cp, cp.Name)
}

// RegisterAs is Register under another cluster name, so several registered
// "clusters" can share one API server (benchmarks with many clusters).
func (b *Bed) RegisterAs(ctx context.Context, cp *ControlPlane, clusterName string) (*corev1.Secret, error) {
	token, err := b.ServiceAccountToken(ctx, cp)
	if err != nil {
		return nil, err
	}
	return b.register(ctx, cp, clusterName, token, "")
}

// RegisterNamespaced registers namespace ns of cp as cluster clusterName:
// an Argo CD cluster Secret with `namespaces: ns` and a token that may act in
// ns only. Many such "clusters" share one API server, which is how the
// benchmarks reach 100 clusters on one machine.
func (b *Bed) RegisterNamespaced(ctx context.Context, cp *ControlPlane, clusterName, ns string) (*corev1.Secret, error) {
	token, err := b.NamespacedToken(ctx, cp, ns)
	if err != nil {
		return nil, err
	}
	return b.register(ctx, cp, clusterName, token, ns)
}

// register creates the Argo CD cluster Secret for cp with token, limited to
// namespaces when it is not empty.
func (b *Bed) register(ctx context.Context, cp *ControlPlane, clusterName, token, namespaces string) (*corev1.Secret, error) {
	cc := inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData}}
	s, err := inventory.NewSecret(b.opts.ArgoNamespace, clusterName, clusterName, cp.Server(), cc)
	if err != nil {
		return nil, err
	}
	if namespaces != "" {
		s.Data["namespaces"] = []byte(namespaces)
	}
	if err := b.Hub.Client.Create(ctx, s); err != nil {
		return nil, fmt.Errorf("failed to create cluster Secret for %s: %w", clusterName, err)
	}
	b.opts.Progress("registered %s (%s) as Argo CD cluster Secret %s/%s", clusterName, cp.Server(), s.Namespace, s.Name)
	return s, nil
}

// ServiceAccountToken ensures the hub's ServiceAccount and RBAC exist in cp
// and returns a fresh token for it (TokenRequest API).
func (b *Bed) ServiceAccountToken(ctx context.Context, cp *ControlPlane) (string, error) {
	if err := inventory.GrantAccess(ctx, cp.Client, nil); err != nil {
		return "", fmt.Errorf("%s: %w", cp.Name, err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return "", fmt.Errorf("failed to create clientset for %s: %w", cp.Name, err)
	}
	return inventory.MintToken(ctx, cs, tokenLifetime*time.Second)
}

// ClientCertificate returns a client certificate and key for a new user of cp
// bound to certhub's downstream ClusterRole: the TLS-client-certificate form
// of an Argo CD registration.
func (b *Bed) ClientCertificate(ctx context.Context, cp *ControlPlane, user string) (certPEM, keyPEM []byte, err error) {
	if _, err := b.ServiceAccountToken(ctx, cp); err != nil { // ensures the ClusterRole
		return nil, nil, err
	}
	u, err := cp.env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to add user %s to %s: %w", user, cp.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: DownstreamClusterRole + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DownstreamClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if err := client.IgnoreAlreadyExists(cp.Client.Create(ctx, binding)); err != nil {
		return nil, nil, fmt.Errorf("failed to bind %s: %w", user, err)
	}
	cfg := u.Config()
	return cfg.CertData, cfg.KeyData, nil
}

// NamespacedToken returns a token of a ServiceAccount that may do in
// namespace ns of cp what certhub needs, and nothing anywhere else (a Role,
// not a ClusterRole): the credentials of a namespace-scoped registration.
func (b *Bed) NamespacedToken(ctx context.Context, cp *ControlPlane, ns string) (string, error) {
	c := cp.Client
	if err := ensureNamespace(ctx, c, ns); err != nil {
		return "", err
	}
	name := "certhub-hub-" + ns
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: inventory.DownstreamRules()},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		},
	}
	for _, o := range objs {
		if err := client.IgnoreAlreadyExists(c.Create(ctx, o)); err != nil {
			return "", fmt.Errorf("failed to create %T %s: %w", o, o.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](tokenLifetime)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to create token: %w", err)
	}
	return tr.Status.Token, nil
}
