package secretcache

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Secrets reads a managed Secret's data once per version, never in a
// cluster whose mode keeps keys downstream, and keeps nothing of a Secret
// certhub did not write.
func TestSecretsReadOncePerVersionAndNeverWhereKeysStay(t *testing.T) {
	key := client.ObjectKey{Namespace: "shop", Name: "web-tls"}
	managed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{hubapi.ManagedByLabel: hubapi.ManagedByValue}}, Data: map[string][]byte{"tls.key": []byte("KEY")}}
	foreign := managed.DeepCopy()
	foreign.Labels = nil
	for _, tc := range []struct {
		name        string
		secret      *corev1.Secret
		readable    bool
		change      bool // the Secret changes between the two asks
		wantReads   int  // full reads (the metadata reads are the watch's)
		wantErr     error
		wantForeign bool
	}{
		{"a managed Secret is read once for two asks", managed, true, false, 1, nil, false},
		{"a new version is read again", managed, true, true, 2, nil, false},
		{"a foreign Secret is read each time, kept never", foreign, true, false, 2, nil, true},
		{"external or off: nothing is read", managed, false, false, 0, ErrKeysStayDownstream, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			c := fake.NewClientBuilder().WithObjects(tc.secret.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					if _, full := o.(*corev1.Secret); full {
						reads++
					}
					return c.Get(ctx, k, o, opts...)
				}}).Build()
			s := &Store{readable: func(multicluster.ClusterName) bool { return tc.readable }}
			cl := &fakeCluster{c: c}
			for i := range 2 {
				got, isForeign, err := s.Get(context.Background(), "east", cl, key)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ask %d: error %v, want %v", i, err, tc.wantErr)
				}
				if err == nil && (got == nil || isForeign != tc.wantForeign) {
					t.Fatalf("ask %d: %v, foreign %v; want the Secret, foreign %v", i, got, isForeign, tc.wantForeign)
				}
				if tc.change && i == 0 {
					cur := &corev1.Secret{}
					if err := c.Get(context.Background(), key, cur); err != nil {
						t.Fatal(err)
					}
					cur.Data["tls.crt"] = []byte("NEW")
					if err := c.Update(context.Background(), cur); err != nil {
						t.Fatal(err)
					}
					reads-- // the test's own read
				}
			}
			if reads != tc.wantReads {
				t.Errorf("%d full reads, want %d", reads, tc.wantReads)
			}
		})
	}
}

// fakeCluster serves a fake client as a downstream cluster.
type fakeCluster struct {
	cluster.Cluster
	c client.Client
}

func (f *fakeCluster) GetClient() client.Client    { return f.c }
func (f *fakeCluster) GetAPIReader() client.Reader { return f.c }
