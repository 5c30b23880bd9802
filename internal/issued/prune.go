package issued

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pruneLoop removes expired entries every PruneInterval.
func (r *Record) pruneLoop(ctx context.Context) {
	t := r.opts.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if n, err := r.Prune(ctx); err != nil {
			r.opts.Log.Error(err, "pruning the record of issued certificates failed")
		} else if n > 0 {
			r.opts.Log.Info("pruned expired certificates from the record", "entries", n)
		}
		t.Reset(r.opts.PruneInterval)
	}
}

// Prune removes the entries RetainAfterExpiry past their notAfter from
// every chunk (any replica's: a replica gone leaves its chunks), and
// deletes chunks left empty that are no writer's current one. A chunk
// changed meanwhile is pruned on the next pass. It returns how many
// entries it removed.
func (r *Record) Prune(ctx context.Context) (int, error) {
	list := &corev1.ConfigMapList{}
	if err := r.opts.Client.List(ctx, list, client.InNamespace(r.opts.Namespace), client.MatchingLabels{RecordLabel: RecordChunk}); err != nil {
		return 0, fmt.Errorf("issued: list the record: %w", err)
	}
	cutoff := r.opts.Clock.Now().Add(-r.opts.RetainAfterExpiry)
	removed := 0
	for i := range list.Items {
		cm := &list.Items[i]
		var gone []string
		for k, v := range cm.Data {
			e, err := decode(v)
			if err != nil || e.NotAfter.Before(cutoff) {
				gone = append(gone, k)
			}
		}
		if len(gone) == 0 {
			continue
		}
		for _, k := range gone {
			delete(cm.Data, k)
		}
		var err error
		if len(cm.Data) == 0 && cm.Annotations[WriterAnnotation] != r.opts.Writer {
			err = r.opts.Client.Delete(ctx, cm, client.Preconditions{ResourceVersion: &cm.ResourceVersion})
		} else {
			err = r.opts.Client.Update(ctx, cm)
		}
		switch {
		case err == nil:
			removed += len(gone)
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		default:
			return removed, fmt.Errorf("issued: prune %s: %w", cm.Name, err)
		}
	}
	return removed, nil
}
