package inventory

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The gate's first decision waits for the first pass over the cluster
// Secrets: a coordinator that decided on the registrations as they trickled
// in — each reconcile one more — would assign its fences differently from
// its peers until the last one arrived, and take and give back fences all
// along (a replica restarted beside four others at 10,000 clusters did so
// for 7 minutes).
//
//	hub cache synced ─▶ list the cluster Secrets ─▶ wait until each has been
//	reconciled once (registered, found invalid, or gone) ─▶ Gate.RegistrationsSynced
//
// Before the gate decides it wants nothing, so that pass connects nothing
// and takes seconds, not the connect time of every owned cluster.

// initialSync is the runnable that tells the gate when the first pass is done.
type initialSync struct{ p *Provider }

var _ manager.LeaderElectionRunnable = initialSync{}

// NeedLeaderElection is false: every replica registers its clusters.
func (initialSync) NeedLeaderElection() bool { return false }

// Start lists the cluster Secrets from the hub cache and waits until each
// has been handled, then calls Gate.RegistrationsSynced. It does not block
// the manager: it returns when ctx ends or once the gate is told.
func (s initialSync) Start(ctx context.Context) error {
	p := s.p
	pending := map[string]bool{}
	backoff := wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Cap: 10 * time.Second, Steps: 1 << 30}
	for {
		list := &corev1.SecretList{}
		err := p.hub.List(ctx, list, client.InNamespace(p.opts.Namespace))
		if err == nil {
			for i := range list.Items {
				if s := &list.Items[i]; p.serves(s.Labels) {
					pending[client.ObjectKeyFromObject(s).String()] = true
				}
			}
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		d := backoff.Step()
		p.log.Error(fmt.Errorf("failed to list cluster Secrets: %w", err), "retrying", "retryIn", d.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
	p.log.Info("registering the cluster Secrets before the shard decides", "secrets", len(pending))
	start := time.Now()
	for {
		p.mu.Lock()
		for source := range pending {
			if p.handled[source] {
				delete(pending, source)
			}
		}
		done := len(pending) == 0
		if done {
			p.handled = nil // from now on nobody waits for a first pass
		}
		p.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.handledCh:
		}
	}
	p.log.Info("every cluster Secret registered; the shard may decide", "took", time.Since(start).Round(time.Millisecond).String())
	p.opts.Connect.RegistrationsSynced()
	return nil
}

// noteHandled records that the reconcile of source has run once, whatever
// it found, for initialSync.
func (p *Provider) noteHandled(source string) {
	p.mu.Lock()
	if p.handled != nil {
		p.handled[source] = true
	}
	p.mu.Unlock()
	select {
	case p.handledCh <- struct{}{}:
	default:
	}
}
