package crsign

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// eventRecorder gives cert-manager's Reporter (which takes client-go's
// record.EventRecorder) the cluster's events.k8s.io recorder.
type eventRecorder struct{ r recorder.EventRecorder }

var _ record.EventRecorder = eventRecorder{}

func recorderFor(r recorder.EventRecorder) record.EventRecorder { return eventRecorder{r} }

func (e eventRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	e.r.Eventf(obj, nil, eventtype, reason, "Sign", "%s", message)
}

func (e eventRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	e.r.Eventf(obj, nil, eventtype, reason, "Sign", "%s", fmt.Sprintf(messageFmt, args...))
}

func (e eventRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	e.Eventf(obj, eventtype, reason, messageFmt, args...)
}
