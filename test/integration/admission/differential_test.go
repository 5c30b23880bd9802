package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/gen"
)

// One answer for one spec: over generated Certificate specs (the policy
// property test's generator, every field free to be wrong), the downstream
// ValidatingAdmissionPolicy's verdict on a real API server and the hub's own
// (certspec.Validate) agree. Specs the CRD schema refuses (the control
// server, which has no policy, refuses them too) never reach the hub and
// are not compared.
func TestPolicyAndHubAgree(t *testing.T) {
	fixture.EnsureNamespace(t, guarded.Client, ns)
	fixture.EnsureNamespace(t, control.Client, ns)
	waitForPolicy(t)
	ctx := context.Background()
	const perSeed = 400
	compared, refused := 0, 0
	disagreements := map[string][]string{}
	for _, seed := range []uint64{11, 12, 13, 14} {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
		for i := range perSeed {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
				"metadata": map[string]any{"name": fmt.Sprintf("gen-%d-%d", seed, i), "namespace": ns},
				"spec":     gen.Spec(r, r.IntN(3) > 0),
			}}
			if err := control.Client.Create(ctx, u.DeepCopy(), client.DryRunAll); err != nil {
				continue // the CRD schema refuses it: no verdict of ours
			}
			compared++
			celErr := guarded.Client.Create(ctx, u.DeepCopy(), client.DryRunAll)
			hubErr := certspec.Validate(u.DeepCopy())
			if celErr != nil {
				refused++
			}
			if (celErr == nil) == (hubErr == nil) {
				continue
			}
			spec, _ := u.Object["spec"].(map[string]any)
			key := "the policy accepts, the hub refuses: " + firstLine(fmt.Sprint(hubErr))
			if celErr != nil {
				key = "the policy refuses, the hub accepts: " + after(celErr.Error(), "denied request: ")
			}
			key = valueRE.ReplaceAllString(key, "…")
			disagreements[key] = append(disagreements[key], fmt.Sprintf("%v", spec))
		}
	}
	keys := make([]string, 0, len(disagreements))
	for k := range disagreements {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%d specs: %s\n    e.g. %s", len(disagreements[k]), k, disagreements[k][0])
	}
	if compared < 500 || refused == 0 || refused == compared {
		t.Errorf("compared %d specs, %d refused: the generator does not exercise both verdicts", compared, refused)
	}
	t.Logf("compared %d generated specs (%d refused by both), %d kinds of disagreement", compared, refused, len(keys))
}

// valueRE finds the values in a message, so that disagreements group by kind.
var valueRE = regexp.MustCompile(`"[^"]*"|\[[^\]]*\]|: -?[0-9]+:`)

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
