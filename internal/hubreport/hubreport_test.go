package hubreport

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// Put creates the report with its label, then replaces its data whole,
// keeping labels others set.
func TestPut(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "certhub", Name: "certhub-report-east"}
	existing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "certhub-report-west", Labels: map[string]string{"team": "platform"}},
		Data: map[string]string{"old": "x"}}
	c := fake.NewClientBuilder().WithObjects(existing).Build()
	cases := []struct {
		name string
		key  client.ObjectKey
		data map[string]string
		bin  map[string][]byte
		want map[string]string
	}{
		{"created", key, map[string]string{"report.json": "{}"}, nil, map[string]string{"report": "true"}},
		{"replaced", key, nil, map[string][]byte{"report.gz": {1}}, map[string]string{"report": "true"}},
		{"an existing object keeps its labels", client.ObjectKeyFromObject(existing), map[string]string{"new": "y"}, nil, map[string]string{"report": "true", "team": "platform"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := Put(ctx, c, tc.key, "report", tc.data, tc.bin); err != nil {
				t.Fatal(err)
			}
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, tc.key, got); err != nil {
				t.Fatal(err)
			}
			if len(got.Data) != len(tc.data) || len(got.BinaryData) != len(tc.bin) {
				t.Errorf("data %v binaryData %v, want exactly %v %v", got.Data, got.BinaryData, tc.data, tc.bin)
			}
			for k, v := range tc.want {
				if got.Labels[k] != v {
					t.Errorf("labels %v, want %v", got.Labels, tc.want)
				}
			}
		})
	}
}
