package drpair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/hubreport"
)

// sync brings standby in step with primary's source and writes its status.
// Deletions need a complete, non-empty source and a selector that parses.
func (p *Pairs) sync(ctx context.Context, standby, primary multicluster.ClusterName, cl cluster.Cluster, stamp string) error {
	log := p.opts.Log.WithValues("cluster", standby, "primary", primary)
	st := &Status{Standby: string(standby), Primary: string(primary), By: strings.SplitN(stamp, "/", 2)[0], Reasons: map[string]int{}}
	src, err := p.readSource(ctx, primary)
	if err != nil {
		return err
	}
	sel, selErr := p.selector(ctx, standby)
	if selErr != nil {
		log.Error(selErr, "Standby selector")
		st.Problems = append(st.Problems, Problem{Reason: "InvalidSelector", Message: selErr.Error()})
		if sel == nil {
			return p.writeStatus(ctx, st)
		}
	}
	if src == nil {
		st.Reasons[ReasonPrimaryNotSeen] = 1
		st.Problems = append(st.Problems, Problem{Reason: ReasonPrimaryNotSeen, Message: "the primary's Certificates were never read (is it registered and reachable?)"})
		return p.writeStatus(ctx, st)
	}
	st.SourceAt = src.At
	c := cl.GetClient()
	list := certspec.NewList()
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("failed to list the Certificates of standby %s: %w", standby, err)
	}
	have := make(map[string]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		u := &list.Items[i]
		have[u.GetNamespace()+"/"+u.GetName()] = u
	}
	m := &mirror{p: p, standby: standby, primary: primary, c: c, live: cl.GetAPIReader(), namespaces: map[string]bool{}}
	var errs []error
	wanted := map[string]bool{}
	for _, e := range src.Certificates {
		key := e.Namespace + "/" + e.Name
		wanted[key] = true
		if !sel.Matches(labels.Set(e.Labels)) {
			continue
		}
		st.Selected++
		reason, msg, err := m.one(ctx, e, have[key])
		if err != nil {
			errs = append(errs, err)
		}
		if reason == "" {
			st.ReadyCertificates++
			continue
		}
		st.Reasons[reason]++
		if len(st.Problems) < maxProblems {
			st.Problems = append(st.Problems, Problem{Namespace: e.Namespace, Name: e.Name, Reason: reason, Message: msg})
		}
	}
	if src.Truncated == 0 && len(src.Certificates) > 0 && selErr == nil {
		for key, u := range have {
			if !wanted[key] && m.ours(u) && u.GetCreationTimestamp().Time.Before(src.At) {
				errs = append(errs, m.remove(ctx, u))
			}
		}
	}
	st.Ready = st.Selected == st.ReadyCertificates && len(st.Problems) == 0
	if len(errs) > 0 {
		log.Error(errors.Join(errs...), "Keeping the standby in step")
	}
	return errors.Join(append(errs, p.writeStatus(ctx, st))...)
}

// mirror is one pass over one standby.
type mirror struct {
	p                *Pairs
	standby, primary multicluster.ClusterName
	c                client.Client
	live             client.Reader
	namespaces       map[string]bool
}

// ours reports whether the mirror created u (for this primary).
func (m *mirror) ours(u *unstructured.Unstructured) bool {
	return u.GetLabels()[hubapi.StandbyMirrorLabel] == "true" && u.GetAnnotations()[hubapi.StandbyOfAnnotation] == string(m.primary)
}

// one keeps e's Certificate in the standby in step (have is the one there)
// and checks it: "" when ready, else a reason and a message.
func (m *mirror) one(ctx context.Context, e Entry, have *unstructured.Unstructured) (reason, message string, err error) {
	switch {
	case have == nil && !e.Issued:
		return ReasonNotIssuedInPrimary, "not Ready in the primary: not mirrored until it is", nil
	case have == nil:
		ok, err := m.namespaceExists(ctx, e.Namespace)
		if err != nil || !ok {
			return ReasonNamespaceMissing, fmt.Sprintf("namespace %s does not exist in the standby", e.Namespace), err
		}
		return ReasonMissing, "created in the standby; not issued yet", m.create(ctx, e)
	case m.ours(have) && e.Issued:
		if err := m.update(ctx, e, have); err != nil {
			return ReasonMissing, "", err
		}
	}
	crt := &cmapi.Certificate{}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(have.Object, crt) != nil || crt.Spec.SecretName == "" {
		return ReasonNotIssued, "its spec names no Secret", nil
	}
	spec := &crt.Spec
	s := &corev1.Secret{}
	if err := m.c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: spec.SecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return ReasonNotIssued, "its Secret does not exist yet", nil
		}
		return ReasonNotIssued, "", err
	}
	if !e.Issued {
		if leaf := leafOf(s); leaf != nil && m.p.opts.clock.Now().Before(leaf.NotAfter) {
			return "", "", nil // the primary is being issued again; the standby still holds one
		}
		return ReasonNotIssuedInPrimary, "not Ready in the primary", nil
	}
	reason, message = check(e, spec, leafOf(s), m.p.opts.clock.Now())
	return reason, message, nil
}

func (m *mirror) namespaceExists(ctx context.Context, ns string) (bool, error) {
	if ok, seen := m.namespaces[ns]; seen {
		return ok, nil
	}
	err := m.live.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("failed to read namespace %s of standby %s: %w", ns, m.standby, err)
	}
	m.namespaces[ns] = err == nil
	return err == nil, nil
}

// object is e as the standby's Certificate: its spec and labels, marked.
func (m *mirror) object(e Entry) (*unstructured.Unstructured, error) {
	spec := map[string]any{}
	if err := json.Unmarshal(e.Spec, &spec); err != nil {
		return nil, fmt.Errorf("the spec of %s/%s in the primary's source does not decode: %w", e.Namespace, e.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind("Certificate"))
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	l := maps.Clone(e.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[hubapi.StandbyMirrorLabel] = "true"
	u.SetLabels(l)
	u.SetAnnotations(map[string]string{hubapi.StandbyOfAnnotation: string(m.primary)})
	return u, nil
}

// write runs fn within the standby's write fence.
func (m *mirror) write(ctx context.Context, op string, fn func(context.Context) error) error {
	_, wctx, done, err := fence.WriteContext(ctx, m.p.opts.WriteFence, m.standby)
	if err != nil {
		return nil // not ours to write now (observe mode, or ownership moved): reported only
	}
	defer done()
	err = fn(wctx)
	if errors.Is(err, errNothingWritten) {
		return nil
	}
	if err == nil {
		m.p.metrics.writes.WithLabelValues(string(m.standby), op).Inc()
	}
	return err
}

// errNothingWritten ends a write that found nothing to do (the object was
// there already): not an error, not a write.
var errNothingWritten = errors.New("nothing written")

func (m *mirror) create(ctx context.Context, e Entry) error {
	u, err := m.object(e)
	if err != nil {
		return err
	}
	return m.write(ctx, "create", func(ctx context.Context) error {
		err := m.c.Create(ctx, u)
		if apierrors.IsAlreadyExists(err) {
			return errNothingWritten // created a moment ago; the cache has not seen it yet
		}
		if err != nil {
			return fmt.Errorf("failed to create Certificate %s/%s in standby %s: %w", e.Namespace, e.Name, m.standby, err)
		}
		m.p.opts.Log.Info("Certificate created in the standby", "cluster", m.standby, "primary", m.primary, "namespace", e.Namespace, "name", e.Name)
		return nil
	})
}

// update brings have's spec and labels to e's, when they differ.
func (m *mirror) update(ctx context.Context, e Entry, have *unstructured.Unstructured) error {
	want, err := m.object(e)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(want.Object["spec"], have.Object["spec"]) && maps.Equal(want.GetLabels(), have.GetLabels()) {
		return nil
	}
	next := have.DeepCopy()
	next.Object["spec"] = want.Object["spec"]
	next.SetLabels(want.GetLabels())
	return m.write(ctx, "update", func(ctx context.Context) error {
		if err := m.c.Update(ctx, next); err != nil {
			return fmt.Errorf("failed to update Certificate %s/%s in standby %s: %w", e.Namespace, e.Name, m.standby, err)
		}
		return nil
	})
}

// remove deletes a Certificate the mirror created whose primary's is gone.
func (m *mirror) remove(ctx context.Context, u *unstructured.Unstructured) error {
	return m.write(ctx, "delete", func(ctx context.Context) error {
		err := m.c.Delete(ctx, u, client.Preconditions{UID: new(u.GetUID())})
		if apierrors.IsNotFound(err) {
			return errNothingWritten
		}
		if err != nil {
			return fmt.Errorf("failed to delete Certificate %s/%s in standby %s: %w", u.GetNamespace(), u.GetName(), m.standby, err)
		}
		m.p.opts.Log.Info("Certificate deleted in the standby: deleted in the primary", "cluster", m.standby, "primary", m.primary, "namespace", u.GetNamespace(), "name", u.GetName())
		return nil
	})
}

// writeStatus writes st when it changed (At is the time it last did) and
// sets the metrics.
func (p *Pairs) writeStatus(ctx context.Context, st *Status) error {
	slices.SortFunc(st.Problems, func(a, b Problem) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	if len(st.Reasons) == 0 {
		st.Reasons = nil
	}
	p.metrics.set(st)
	digest, err := digestOf(st)
	if err != nil {
		return err
	}
	name := StatusName(st.Standby)
	if !p.changed(name, digest) {
		return nil
	}
	st.At = p.opts.clock.Now().UTC()
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := hubreport.Put(ctx, p.opts.Hub, client.ObjectKey{Namespace: p.opts.Namespace, Name: name}, hubapi.StandbyStatusLabel,
		map[string]string{StatusKey: string(raw)}, nil); err != nil {
		return err
	}
	p.wrote(name, digest)
	return nil
}
