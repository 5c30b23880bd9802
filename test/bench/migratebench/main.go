// Command migratebench measures moving a cert-manager fleet onto the hub
// (issue 31's row of docs/benchmarks.md). Each of -clusters downstream API
// servers runs cert-manager v1.21's own controllers (test/fixture/cmrunner)
// with a CA ClusterIssuer whose name and key pair the hub's ClusterIssuer
// shares, and cert-manager issues -per Certificates there. The clusters are
// registered in mode observe, each through a recording proxy (every write
// the hub makes is counted, none of cert-manager's or the benchmark's);
// one hub replica runs. The benchmark then waits for every cluster's plan,
// stops cert-manager and switches every cluster to mode issue (one label
// change each), and waits until the hub has taken every Secret over and
// every Certificate is Ready. It prints the time to the plans, the writes
// in observe (goal 0), the take-over's wall time, downstream writes per
// Certificate, and new certificates per Certificate (serials changed; goal
// 0: the same CA signed them). `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	issuer = "fleet-ca"
	ns     = "apps"
)

// Result is the row of the table.
type Result struct {
	Clusters     int     `json:"clusters"`
	Certificates int     `json:"certificates"`
	IssuedByCM   float64 `json:"certManagerIssueSeconds"`
	PlannedS     float64 `json:"planSeconds"`
	ObserveW     int     `json:"observeWrites"`
	WallS        float64 `json:"takeOverSeconds"`
	Writes       int     `json:"takeOverWrites"`
	WritesPer    float64 `json:"downstreamWritesPerCertificate"`
	NewCerts     int     `json:"newCertificates"`
	// CertManagerChanged counts certificates cert-manager itself replaced
	// after its Certificates were all Ready (before the hub wrote).
	CertManagerChanged int     `json:"certManagerReplaced"`
	NewPer             float64 `json:"newCertificatesPerCertificate"`
}

func main() {
	clusters := flag.Int("clusters", 10, "Downstream API servers, each running cert-manager")
	per := flag.Int("per", 100, "Certificates cert-manager issues in each cluster")
	out := flag.String("out", "", "JSON output (default test/bench/results/migrate-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*clusters, *per, *out); err != nil {
		fmt.Fprintln(os.Stderr, "migratebench:", err)
		os.Exit(1)
	}
}

// cluster is one downstream with its cert-manager and proxy.
type cluster struct {
	cp      *testbed.ControlPlane
	cm      *cmrunner.Runner
	proxy   *testbed.Proxy
	reg     *corev1.Secret
	serials map[string]string
}

func run(clusters, per int, out string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: clusters})
	if err != nil {
		return err
	}
	defer func() { _ = bed.Stop() }()
	if _, err := bed.CreateCAIssuer(ctx, issuer); err != nil {
		return err
	}
	caSecret := &corev1.Secret{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: issuer + "-ca"}, caSecret); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "migratebench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	// cert-manager issues every Certificate, in every cluster at once.
	start := time.Now()
	fleet := make([]*cluster, clusters)
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for i, cp := range bed.Downstreams {
		fleet[i] = &cluster{cp: cp}
		wg.Go(func() {
			if err := withCertManager(ctx, fleet[i], caSecret, dir, per); err != nil {
				errs <- fmt.Errorf("%s: %w", cp.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	defer func() {
		for _, c := range fleet {
			if c.cm != nil {
				_ = c.cm.Stop()
			}
		}
	}()
	r := Result{Clusters: clusters, Certificates: clusters * per, IssuedByCM: time.Since(start).Seconds()}
	benchutil.Logf("cert-manager issued %d Certificates in %d clusters in %.1fs", r.Certificates, clusters, r.IssuedByCM)

	for _, c := range fleet {
		if c.proxy, err = c.cp.StartProxy(); err != nil {
			return err
		}
		defer c.proxy.Close()
		if c.reg, err = bed.RegisterThrough(ctx, c.cp, c.cp.Name, c.proxy, map[string]string{hubapi.ModeLabel: hubapi.ModeObserve}); err != nil {
			return err
		}
	}
	start = time.Now()
	defer benchutil.StartHub(ctx, bed, nil)()

	// Observe: every cluster's plan says Adopt for every Certificate.
	said := time.Now()
	if err := poll(ctx, "every plan", func() (bool, error) {
		reports, err := writegate.ReadReports(ctx, bed.Hub.Client, bed.HubNamespace())
		if err != nil {
			return false, err
		}
		done := true
		for _, c := range fleet {
			done = done && reports[c.cp.Name].Counts[writegate.ActionAdopt] == per
		}
		if !done && time.Since(said) > 15*time.Second {
			said = time.Now()
			for _, c := range fleet {
				r := reports[c.cp.Name]
				benchutil.Logf("waiting for %s's plan: mode %s, conflict %t, counts %v", c.cp.Name, r.Mode, r.Conflict, r.Counts)
			}
		}
		return done, nil
	}); err != nil {
		return err
	}
	r.PlannedS = time.Since(start).Seconds()
	for _, c := range fleet {
		r.ObserveW += len(c.proxy.Writes())
		c.proxy.Reset()
	}
	benchutil.Logf("every plan complete %.1fs after the hub started (%d writes in observe)", r.PlannedS, r.ObserveW)

	// The move: cert-manager stopped, mode issue, in every cluster. The
	// serials are read again once cert-manager has stopped: what changed
	// since its Certificates were Ready is cert-manager's doing, not the hub's.
	start = time.Now()
	for _, c := range fleet {
		if err := c.cm.Stop(); err != nil {
			return err
		}
		c.cm = nil
		now, err := serials(ctx, c.cp.Client)
		if err != nil {
			return err
		}
		for name, s := range c.serials {
			if now[name] != s {
				r.CertManagerChanged++
				benchutil.Logf("%s: cert-manager itself replaced %s's certificate after it was Ready", c.cp.Name, name)
			}
		}
		c.serials = now
		s := &corev1.Secret{}
		if err := bed.Hub.Client.Get(ctx, client.ObjectKeyFromObject(c.reg), s); err != nil {
			return err
		}
		s.Labels[hubapi.ModeLabel] = hubapi.ModeIssue
		if err := bed.Hub.Client.Update(ctx, s); err != nil {
			return err
		}
	}
	if err := poll(ctx, "every Secret taken over", func() (bool, error) {
		for _, c := range fleet {
			if n, err := takenOver(ctx, c.cp.Client); err != nil || n < per {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	r.WallS = time.Since(start).Seconds()
	for _, c := range fleet {
		r.Writes += len(c.proxy.Writes())
		now, err := serials(ctx, c.cp.Client)
		if err != nil {
			return err
		}
		for name, s := range c.serials {
			if now[name] != s {
				r.NewCerts++
				benchutil.Logf("%s: the hub re-issued %s: %s", c.cp.Name, name, whyIssued(ctx, c.cp.Client, name))
			}
		}
	}
	r.WritesPer, r.NewPer = float64(r.Writes)/float64(r.Certificates), float64(r.NewCerts)/float64(r.Certificates)
	benchutil.Logf("taken over in %.1fs: %d downstream writes (%.2f per Certificate), %d new certificates by the hub (%d replaced by cert-manager itself before it stopped)",
		r.WallS, r.Writes, r.WritesPer, r.NewCerts, r.CertManagerChanged)

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nMIGRATION (1 replica, same CA)\tCERTIFICATES\tPLANS READY\tOBSERVE WRITES\tTAKE-OVER WALL\tDOWNSTREAM WRITES/CERT\tNEW CERTS/CERT")
	fmt.Fprintf(tw, "%d clusters from cert-manager\t%d\t%.1fs\t%d\t%.1fs\t%.2f\t%.3f\n", r.Clusters, r.Certificates, r.PlannedS, r.ObserveW, r.WallS, r.WritesPer, r.NewPer)
	_ = tw.Flush()
	path, err := benchutil.WriteJSON("migrate", out, r)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// withCertManager gives c's cluster cert-manager with the fleet's CA
// ClusterIssuer, has it issue per Certificates, and records their serials.
func withCertManager(ctx context.Context, c *cluster, caSecret *corev1.Secret, dir string, per int) error {
	cl := c.cp.Client
	for _, name := range []string{ns, "cert-manager"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return err
		}
	}
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: issuer + "-ca"},
		Type: corev1.SecretTypeTLS, Data: caSecret.Data}); err != nil {
		return err
	}
	if err := cl.Create(ctx, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: issuer},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: issuer + "-ca"}}}}); err != nil {
		return err
	}
	kubeconfig, err := c.cp.WriteKubeconfig(dir)
	if err != nil {
		return err
	}
	if c.cm, err = cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig, Identity: "cert-manager-" + c.cp.Name}); err != nil {
		return err
	}
	ref := cmmeta.IssuerReference{Name: issuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	if err := benchutil.CreateInBatches(per, func(i int) error {
		name := fmt.Sprintf("app-%04d", i)
		return cl.Create(ctx, fixture.Certificate(ns, name, issuer, fixture.WithNames("", name+"."+ns+".example.com"), fixture.WithIssuer(ref)))
	}); err != nil {
		return err
	}
	if err := poll(ctx, c.cp.Name+"'s Certificates Ready", func() (bool, error) {
		list := &cmapi.CertificateList{}
		if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range list.Items {
			if !fixture.IsReady(&list.Items[i]) {
				return false, nil
			}
		}
		return len(list.Items) == per, nil
	}); err != nil {
		return err
	}
	c.serials, err = serials(ctx, cl)
	return err
}

// whyIssued lists the Events of the Certificate whose Secret is secret (the
// benchmark names them alike), with who reported them.
func whyIssued(ctx context.Context, cl client.Client, secret string) string {
	list := &corev1.EventList{}
	if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == cmapi.CertificateKind && e.InvolvedObject.Name+"-tls" == secret {
			out = append(out, fmt.Sprintf("[%s%s] %s: %s", e.Source.Component, e.ReportingController, e.Reason, e.Message))
		}
	}
	return strings.Join(out, "; ")
}

// takenOver counts the Secrets in ns the hub has written (its label) whose
// Certificate is Ready.
func takenOver(ctx context.Context, cl client.Client) (int, error) {
	secrets := &corev1.SecretList{}
	if err := cl.List(ctx, secrets, client.InNamespace(ns), client.MatchingLabels{hubapi.ManagedByLabel: hubapi.ManagedByValue}); err != nil {
		return 0, err
	}
	list := &cmapi.CertificateList{}
	if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	ready := map[string]bool{}
	for i := range list.Items {
		ready[list.Items[i].Spec.SecretName] = fixture.IsReady(&list.Items[i])
	}
	n := 0
	for _, s := range secrets.Items {
		if ready[s.Name] {
			n++
		}
	}
	return n, nil
}

// serials maps each TLS Secret in ns to its certificate's serial.
func serials(ctx context.Context, cl client.Client) (map[string]string, error) {
	secrets := &corev1.SecretList{}
	if err := cl.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range secrets.Items {
		if c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey]); err == nil {
			out[s.Name] = c.SerialNumber.String()
		}
	}
	return out, nil
}

// poll checks cond every half second for at most 15 minutes.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Minute, true, func(context.Context) (bool, error) {
		return cond()
	}); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
