package hubreport

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Put creates the ConfigMap key with label=true and data (or binaryData),
// or replaces the data of the one there.
func Put(ctx context.Context, c client.Client, key client.ObjectKey, label string, data map[string]string, binaryData map[string][]byte) error {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{label: "true"}},
			Data: data, BinaryData: binaryData}
		err = c.Create(ctx, cm)
	case err == nil:
		cm = cm.DeepCopy()
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[label] = "true"
		cm.Data, cm.BinaryData = data, binaryData
		err = c.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("failed to write report %s: %w", key, err)
	}
	return nil
}
