package acme

import (
	"context"
	"crypto"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
)

// An ACMEOrder deleted while its order runs at the CA hands that order to
// the issuance's next ACMEOrder, so one issuance costs one CA order
// whatever happens to the object (Let's Encrypt would hand back its
// pending order for the same names; Pebble and other CAs would not):
//
//	deleted (finalizer held) ──▶ TXT records cleaned up ──▶ handOver: its key
//	Secret kept, no longer owned by it, marked with the CA order's URL
//	──▶ finalizer removed ──▶ certsync asks again ──▶ create finds the mark:
//	same key, no budget drawn (the CA counted the order already), the new
//	ACMEOrder's spec.continues is the CA order's URL ──▶ authorize reads
//	its authorizations back from the CA.
//
// A mark older than OrderRetention is of no use and is deleted (when the
// issuance asks again, or by sweepResumeMarks).

// handOver keeps what the issuance's next ACMEOrder needs to continue
// ord's CA order: its key Secret (a bare mark for a request's CSR, whose
// key is downstream), no longer owned by ord, marked with the order's URL.
func (s *Service) handOver(ctx context.Context, ord *hubapi.ACMEOrder) error {
	until := s.opts.Clock.Now().Add(s.opts.OrderRetention).UTC().Format(time.RFC3339)
	marks := map[string]string{hubapi.ResumeOrderAnnotation: ord.Status.URL, hubapi.ResumeUntilAnnotation: until}
	sec := &corev1.Secret{}
	err := s.hub.Get(ctx, client.ObjectKey{Namespace: ord.Namespace, Name: ord.Name}, sec)
	if apierrors.IsNotFound(err) {
		if !ord.Spec.KeyInCluster {
			return nil // its key is gone: nothing to continue the order with
		}
		mark := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ord.Namespace, Name: ord.Name,
			Labels: map[string]string{hubapi.ACMEOrderLabel: ord.Name}, Annotations: marks}, Type: corev1.SecretTypeOpaque}
		if err := s.hub.Create(ctx, mark); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to keep the CA order of deleted ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get the key Secret of deleted ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	base := sec.DeepCopy()
	sec.OwnerReferences = nil
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	for k, v := range marks {
		sec.Annotations[k] = v
	}
	if err := s.hub.Patch(ctx, sec, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("failed to keep the key Secret of deleted ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	logr.FromContextOrDiscard(ctx).Info("ACMEOrder deleted while its CA order ran; the issuance's next order continues it", "order", ord.Name, "url", ord.Status.URL)
	return nil
}

// resumable reads the mark a deleted order of this issuance (name) left:
// the CA order's URL and the key to continue it with (nil for a request's
// CSR). "" when there is none, it expired (then deleted), or it cannot
// serve req (the Certificate keeps another key of its own).
func (s *Service) resumable(ctx context.Context, name string, req issuers.OrderRequest) (string, crypto.Signer) {
	sec := &corev1.Secret{}
	if err := s.hub.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, sec); err != nil {
		return "", nil
	}
	url, expired := resumeMark(sec, s.opts.Clock.Now())
	if url == "" {
		return "", nil
	}
	if expired {
		_ = s.hub.Delete(ctx, sec, client.Preconditions{UID: &sec.UID})
		return "", nil
	}
	if req.CSR != nil {
		return url, nil
	}
	key, err := pki.DecodePrivateKeyBytes(sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return "", nil
	}
	if req.Key != nil {
		if same, err := pki.PublicKeysEqual(req.Key.Public(), key.Public()); err != nil || !same {
			return "", nil
		}
	}
	return url, key
}

// resumeMark is the CA order URL a deleted order's Secret is marked with
// ("" when sec is unmarked or owned by an order again), and whether the
// mark is past its time (or its time does not parse).
func resumeMark(sec *corev1.Secret, now time.Time) (url string, expired bool) {
	url = sec.Annotations[hubapi.ResumeOrderAnnotation]
	if url == "" || len(sec.OwnerReferences) > 0 {
		return "", false
	}
	until, err := time.Parse(time.RFC3339, sec.Annotations[hubapi.ResumeUntilAnnotation])
	return url, err != nil || !now.Before(until)
}

// adopt makes the mark of a continued order ord's key Secret again (owned
// by ord, unmarked), or deletes a bare mark (a request's CSR needs none).
func (s *Service) adopt(ctx context.Context, ord *hubapi.ACMEOrder, owner metav1.OwnerReference) error {
	sec := &corev1.Secret{}
	if err := s.hub.Get(ctx, client.ObjectKey{Namespace: ord.Namespace, Name: ord.Name}, sec); err != nil {
		return fmt.Errorf("failed to get the key Secret of continued ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	if ord.Spec.KeyInCluster {
		return client.IgnoreNotFound(s.hub.Delete(ctx, sec, client.Preconditions{UID: &sec.UID}))
	}
	base := sec.DeepCopy()
	sec.OwnerReferences = []metav1.OwnerReference{owner}
	delete(sec.Annotations, hubapi.ResumeOrderAnnotation)
	delete(sec.Annotations, hubapi.ResumeUntilAnnotation)
	if err := s.hub.Patch(ctx, sec, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to adopt the key Secret of continued ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	return nil
}

// sweepResumeMarks deletes the marks of deleted orders nobody continued
// before they expired, every OrderRetention until ctx ends.
func (s *Service) sweepResumeMarks(ctx context.Context) error {
	t := time.NewTicker(s.opts.OrderRetention)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		list := &corev1.SecretList{}
		if err := s.hub.List(ctx, list, client.InNamespace(s.opts.Namespace), client.HasLabels{hubapi.ACMEOrderLabel}); err != nil {
			continue
		}
		for i := range list.Items {
			sec := &list.Items[i]
			if url, expired := resumeMark(sec, s.opts.Clock.Now()); url != "" && expired {
				_ = s.hub.Delete(ctx, sec, client.Preconditions{UID: &sec.UID})
			}
		}
	}
}

// continueOrder reads back from the CA what an order continued from a
// deleted ACMEOrder (spec.continues: only its URL is known) needs: its
// finalize URL and authorizations. An order the CA no longer holds as usable fails, and
// the issuance orders anew after its back-off.
func (s *Service) continueOrder(ctx context.Context, cl *acmeapi.Client, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	o, err := cl.GetOrder(ctx, next.Spec.Continues)
	if err != nil {
		if refused(err) {
			s.failInto(ctx, ci, next, ReasonCAError, fmt.Sprintf("the CA's order of a deleted ACMEOrder cannot be continued: %v", err))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get the order to continue: %w", err)
	}
	if o.Status == acmeapi.StatusInvalid {
		s.failInto(ctx, ci, next, ReasonCAError, "the CA's order of a deleted ACMEOrder is invalid")
		return ctrl.Result{}, nil
	}
	next.Status.URL, next.Status.FinalizeURL = next.Spec.Continues, o.FinalizeURL
	for _, u := range o.AuthzURLs {
		next.Status.Challenges = append(next.Status.Challenges, hubapi.ACMEChallenge{AuthorizationURL: u})
	}
	return ctrl.Result{}, nil
}
