package migration

import (
	"context"
	"fmt"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// perWaveCluster is how many Certificates each wave's cluster holds.
const perWaveCluster = 10

// waveCluster is one cluster of the wave tier.
type waveCluster struct {
	name   string
	cp     *testbed.ControlPlane
	cm     *certManager
	proxy  *testbed.Proxy
	reg    *corev1.Secret
	crts   []*cmapi.Certificate
	before map[string]string // serials cert-manager left, taken when it stopped
}

// Three clusters run cert-manager with a CA ClusterIssuer whose name and
// key pair the hub's ClusterIssuer shares, so no Certificate changes: their
// Argo CD Secrets are labelled certhub.io/wave=1/2/3 and certhub.io/mode=observe. Each
// wave is one label change in Git (mode=issue on the wave's clusters; the
// same selector prunes cert-manager's Application there, which the test
// does by stopping it). At every step every Certificate of the fleet is
// Ready, no serial a moved cluster had from cert-manager changes, and
// clusters of later waves see no write.
func TestMigrateInWaves(t *testing.T) {
	ctx := context.Background()
	ref := cmmeta.IssuerReference{Name: sameIssuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	fleet := make([]*waveCluster, 3)
	for i := range fleet {
		c := &waveCluster{name: fmt.Sprintf("wave-%d", i+1), cp: bed.Downstreams[1+i]}
		c.cm = startCertManagerClusterIssuer(t, c.cp)
		c.crts = issueWithCertManager(t, c.cp, "app", perWaveCluster, ref)
		var err error
		if c.proxy, err = c.cp.StartProxy(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.proxy.Close)
		if c.reg, err = bed.RegisterThrough(ctx, c.cp, c.name, c.proxy,
			map[string]string{hubapi.WaveLabel: fmt.Sprint(i + 1), hubapi.ModeLabel: hubapi.ModeObserve}); err != nil {
			t.Fatal(err)
		}
		fleet[i] = c
	}
	for _, c := range fleet {
		waitReport(t, c.name, "Adopt for every Certificate", func(r writegate.Report) bool {
			return r.Mode == writegate.Observe && r.Counts[writegate.ActionAdopt] == perWaveCluster
		})
	}

	for wave := 1; wave <= len(fleet); wave++ {
		// The commit: mode=issue on the wave's clusters (and cert-manager
		// pruned from them).
		for _, c := range fleet {
			if c.reg.Labels[hubapi.WaveLabel] == fmt.Sprint(wave) {
				// cert-manager goes first and the serials are taken then:
				// while it ran the cluster it may re-issue on its own (it
				// once did here, revision 2 of a Certificate already Ready),
				// which is not the migration's doing.
				c.cm.stop()
				c.before = serials(t, c.cp, c.crts)
				setMode(t, c.reg, hubapi.ModeIssue)
			}
		}
		for i, c := range fleet {
			moved := i < wave
			if moved {
				waitTakenOver(t, c.cp, c.crts)
			}
			expectAllReady(t, c.cp, c.crts)
			if moved {
				for name, s := range serials(t, c.cp, c.crts) {
					if s != c.before[name] {
						t.Errorf("wave %d, %s: %s re-issued (serial %s → %s)", wave, c.name, name, c.before[name], s)
					}
				}
			}
			if w := c.proxy.Writes(); !moved && len(w) > 0 {
				t.Errorf("wave %d: %s, not moved yet, was written %d times:\n%s", wave, c.name, len(w), writesOf(w))
			}
		}
		t.Logf("wave %d moved: every Certificate of %d clusters Ready, no serial changed", wave, len(fleet))
	}
	for _, c := range fleet {
		t.Logf("%s: %d downstream writes for %d Certificates", c.name, len(c.proxy.Writes()), perWaveCluster)
	}
}
