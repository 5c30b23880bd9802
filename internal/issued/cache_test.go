package issued

import "sigs.k8s.io/controller-runtime/pkg/cache"

// nopCache satisfies Options.Cache in tests that feed the index themselves.
type nopCache struct{ cache.Cache }
