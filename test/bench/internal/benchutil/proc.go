package benchutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// BuildCertHub builds the certhub binary into dir and returns its path.
func BuildCertHub(dir string) (string, error) {
	bin := filepath.Join(dir, "certhub")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, b)
	}
	return bin, nil
}

// StartReplica starts `bin run --identity id args...`, logging to a file in dir.
func StartReplica(bin, dir, id string, args ...string) (*fleet.Replica, error) {
	return StartReplicaEnv(bin, dir, id, nil, args...)
}

// StartReplicaEnv is StartReplica with env added to the replica's environment.
func StartReplicaEnv(bin, dir, id string, env []string, args ...string) (*fleet.Replica, error) {
	return fleet.LaunchEnv(id, bin, dir, env, append([]string{"run", "--identity", id}, args...)...)
}

// Stop sends sig to r and waits for the exit, SIGKILL after 60s.
func Stop(r *fleet.Replica, sig syscall.Signal) {
	if r.StopWithin(sig, 60*time.Second) != nil && r.Running() {
		_ = r.Stop(syscall.SIGKILL)
	}
}

// StartHub runs one hub replica in-process against bed ("bench-0", no
// metrics or probe ports), after adjust (when set) changed its options. The
// returned stop ends it and reports its error on stderr.
func StartHub(ctx context.Context, bed *testbed.Bed, adjust func(*hub.Options)) (stop func()) {
	o := hub.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = bed.HubNamespace(), bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "bench-0"
	if adjust != nil {
		adjust(o)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	go func() { done <- hub.Run(ctx, bed.Hub.Config, o) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "hub replica: %v\n", err)
		}
	}
}

// StartBed starts a hub and downstreams API servers with the CA
// ClusterIssuer named issuer, and returns the flags a replica needs to serve
// it (no metrics or probe ports; the caller stops the bed).
func StartBed(ctx context.Context, what, dir string, downstreams int, issuer string) (*testbed.Bed, []string, error) {
	Logf("%s: starting hub + %d downstream API servers", what, downstreams)
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: downstreams})
	if err != nil {
		return nil, nil, err
	}
	if _, err := bed.CreateCAIssuer(ctx, issuer); err != nil {
		_ = bed.Stop()
		return nil, nil, err
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(dir)
	if err != nil {
		_ = bed.Stop()
		return nil, nil, err
	}
	return bed, []string{"--kubeconfig", kubeconfig, "--namespace", bed.HubNamespace(), "--cluster-secret-namespace", bed.ArgoNamespace(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, nil
}

// RSSMedian is the median of RSSReadings, in MiB to one decimal.
func RSSMedian(p *fleet.Replica) (float64, error) {
	rss, err := RSSReadings(p)
	if err != nil {
		return 0, err
	}
	return float64(int(Median(rss)*10+0.5)) / 10, nil
}

// RSSReadings takes 5 VmRSS readings of p a second apart, in MiB.
func RSSReadings(p *fleet.Replica) ([]float64, error) {
	var rss []float64
	for range 5 {
		b, err := p.RSS()
		if err != nil {
			return nil, err
		}
		rss = append(rss, float64(b)/(1<<20))
		time.Sleep(time.Second)
	}
	return rss, nil
}

// DownstreamWatches is the bed's downstream API servers' open watches in
// all (their apiserver_longrunning_requests).
func DownstreamWatches(ctx context.Context, bed *testbed.Bed) (float64, error) {
	total := 0.0
	for _, cp := range bed.Downstreams {
		sm, err := fleet.APIServerMetrics(ctx, cp.Config)
		if err != nil {
			return 0, err
		}
		total += sm.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH"})
	}
	return total, nil
}
