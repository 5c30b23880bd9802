package writegate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/writegate"
)

// failingCache fails every List with err.
type failingCache struct {
	cache.Cache
	err error
}

func (c failingCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return c.err
}

type cacheCluster struct {
	cluster.Cluster
	c cache.Cache
}

func (c cacheCluster) GetCache() cache.Cache { return c.c }

// A cluster that does not serve the kind (no Gateway API there) has
// nothing to decide again: no error is logged; any other failure to list
// is logged as an error naming the cluster.
func TestRequeueSourceOnAKindTheClusterLacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		logged bool
	}{
		{"kind not served", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "gateway.networking.k8s.io", Kind: "Gateway"}}, false},
		{"another failure", errors.New("cache not synced"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs []string
			log := funcr.New(func(_, args string) { logs = append(logs, args) }, funcr.Options{})
			var changed func(multicluster.ClusterName)
			src := writegate.RequeueSource(func(f func(multicluster.ClusterName)) { changed = f },
				func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) {
					return cacheCluster{c: failingCache{err: tc.err}}, nil
				}, func() client.ObjectList { return &corev1.ConfigMapList{} }, nil, log)
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
			defer q.ShutDown()
			if err := src.Start(context.Background(), q); err != nil {
				t.Fatal(err)
			}
			changed("east")
			if q.Len() != 0 {
				t.Errorf("%d queued", q.Len())
			}
			errorLogged := strings.Contains(strings.Join(logs, "\n"), `"error"`) && strings.Contains(strings.Join(logs, "\n"), `"cluster"="east"`)
			if errorLogged != tc.logged {
				t.Errorf("logs %q; want an error naming the cluster: %t", logs, tc.logged)
			}
		})
	}
}
