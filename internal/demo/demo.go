// Package demo is `certhub-demo`: certhub end to end on this machine — a
// hub and downstream control planes (real kube-apiserver + etcd from the
// envtest cache), Argo CD registrations, an IssuancePolicy, `certhub run`
// replicas as processes of the certhub binary, Certificates issued, a
// failover staged and `certhub status` — with nothing left running on exit.
// It lives apart from internal/app so the certhub binary the image ships
// links no test machinery (make lint checks).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/spf13/cobra"
	uzap "go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/testbed"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// demoOptions configure `certhub-demo`.
type demoOptions struct {
	certhub     string // the certhub binary the replicas and `certhub status` run
	downstreams int
	replicas    int
	timeout     time.Duration
	verbose     bool
	acme        bool
}

// NewCommand is `certhub-demo`: the demo as its own command, so the certhub
// binary the image ships links no test machinery (control planes, Pebble,
// BIND). It runs the certhub binary (--certhub) as the hub's replicas.
func NewCommand() *cobra.Command {
	d := demoOptions{downstreams: 2, replicas: 2, timeout: 3 * time.Minute}
	cmd := &cobra.Command{
		Use:          "certhub-demo",
		SilenceUsage: true,
		Short:        "Run the hub on local control planes and issue example Certificates",
		Long: `Run certhub end to end on this machine, with no cluster and no Docker:

  1. start a hub and --clusters downstream control planes (real kube-apiserver
     + etcd, built from Go modules by hack/ensure-envtest-assets.sh; found via
     $KUBEBUILDER_ASSETS or the envtest cache),
  2. create a CA ClusterIssuer in the hub (its key stays in the hub),
  3. register each downstream cluster as an Argo CD cluster Secret in the hub,
  4. run --replicas hub replicas as processes ('certhub run'); they split the
     clusters between them, one writer per cluster,
  5. install an IssuancePolicy in the hub (the replicas run with
     --default-policy=deny): each cluster may get names under its own
     subdomain only,
  6. apply example Certificates in every downstream cluster, and one that asks
     for another cluster's name; wait until the others are Ready and that one
     is denied (PolicyDenied), and print who owns each cluster and what was
     issued,
  8. stop (SIGTERM) the replica that owns the first cluster, issue one more
     Certificate there and show the other replica took over.

With --acme it also runs an ACME CA (Pebble) and a DNS server (BIND) on
loopback ('make acme-bed' builds them; $CERTHUB_ACME_BED), creates an ACME
ClusterIssuer "demo-acme" in the hub whose DNS-01 solver writes TXT records
to BIND over RFC 2136 with a TSIG key that stays in the hub, and applies one
more Certificate per cluster from it: one ACME account serves every cluster.
'make demo-acme' runs that.

Everything is stopped and removed on exit and on Ctrl-C. 'make demo' builds
the binaries and runs this.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := uzap.ErrorLevel
			if d.verbose {
				level = uzap.InfoLevel
			}
			ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
			var err error
			if d.certhub, err = certhubBinary(d.certhub); err != nil {
				return err
			}
			return runDemo(ctrl.SetupSignalHandler(), cmd.OutOrStdout(), d)
		},
	}
	cmd.Flags().StringVar(&d.certhub, "certhub", "", "The certhub binary to run as the hub's replicas. Default: certhub beside this command, else on $PATH")
	cmd.Flags().IntVar(&d.downstreams, "clusters", d.downstreams, "Number of downstream clusters")
	cmd.Flags().IntVar(&d.replicas, "replicas", d.replicas, "Number of hub replicas (processes)")
	cmd.Flags().DurationVar(&d.timeout, "timeout", d.timeout, "Give up when the Certificates are not Ready after this long")
	cmd.Flags().BoolVarP(&d.verbose, "verbose", "v", d.verbose, "Show the hub's logs")
	cmd.Flags().BoolVar(&d.acme, "acme", d.acme, "Also issue from an ACME ClusterIssuer: Pebble + BIND on loopback (make acme-bed), DNS-01 solved from the hub")
	return cmd
}

// demoPolicy lets each cluster get names under its own subdomain (of
// example.com, and of acmeZone when set), and each namespace its
// in-cluster service name.
func demoPolicy(acmeZone string) hubapi.IssuancePolicy {
	names := []string{"*.{{cluster}}.example.com", "{{namespace}}.svc.cluster.local"}
	if acmeZone != "" {
		names = append(names, "*.{{cluster}}."+acmeZone)
	}
	return hubapi.IssuancePolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: hubapi.SchemeGroupVersion.String(), Kind: hubapi.IssuancePolicyKind},
		ObjectMeta: metav1.ObjectMeta{Name: "own-subdomain"},
		Spec: hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
			DNSNames: &hubapi.StringValues{Values: names},
		}, Constraints: hubapi.PolicyConstraints{PrivateKey: &hubapi.PrivateKeyConstraints{Algorithm: cmapi.ECDSAKeyAlgorithm}}},
	}
}

// demoACMEIssuer is the --acme ClusterIssuer.
const demoACMEIssuer = "demo-acme"

// startDemoACME runs Pebble + BIND and creates the ACME ClusterIssuer (and
// its TSIG Secret) in the hub; it returns the bed and the replicas' flags.
func startDemoACME(ctx context.Context, bed *testbed.Bed) (*acmebed.Bed, []string, error) {
	ca, err := acmebed.Start(ctx, acmebed.Options{Env: []string{"PEBBLE_VA_NOSLEEP=1"}})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to start Pebble and BIND (make acme-bed builds them): %w", err)
	}
	hub := bed.Hub.Client
	if err := hub.Create(ctx, ca.TSIGSecretObject(bed.HubNamespace(), "demo-tsig")); err != nil {
		return ca, nil, err
	}
	if err := hub.Create(ctx, ca.ClusterIssuer(demoACMEIssuer, "demo-acme-account", "demo-tsig")); err != nil {
		return ca, nil, err
	}
	return ca, []string{"--acme-dns01-recursive-nameservers", ca.Nameserver, "--acme-dns01-recursive-nameservers-only"}, nil
}

// waitIssuerReady waits until the ClusterIssuer name is Ready (its ACME
// account registered).
func waitIssuerReady(ctx context.Context, hub client.Client, name string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ci := &cmapi.ClusterIssuer{}
		if err := hub.Get(ctx, client.ObjectKey{Name: name}, ci); err != nil {
			return false, nil // transient; keep polling
		}
		for _, c := range ci.Status.Conditions {
			if c.Type == cmapi.IssuerConditionReady && c.Status == cmmeta.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// demoDenied asks, in cluster, for a name of other: the policy denies it.
func demoDenied(cluster, other string) *cmapi.Certificate {
	crt := demoCertificates(cluster, "")[0]
	crt.Name, crt.Spec.SecretName, crt.Spec.DNSNames = "stolen", "stolen-tls", []string{"shop." + other + ".example.com"}
	return crt
}

// demoCertificates are applied to every downstream cluster; with an
// acmeZone, one more from the ACME ClusterIssuer.
func demoCertificates(clusterName, acmeZone string) []*cmapi.Certificate {
	ref := cmmeta.IssuerReference{Name: "demo-ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	mk := func(ns, name string, dns ...string) *cmapi.Certificate {
		return &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: cmapi.CertificateSpec{
				SecretName: name + "-tls",
				DNSNames:   dns,
				IssuerRef:  ref,
				PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
			},
		}
	}
	out := []*cmapi.Certificate{
		mk("shop", "web", "shop."+clusterName+".example.com"),
		mk("payments", "api", "api.payments."+clusterName+".example.com", "payments.svc.cluster.local"),
	}
	if acmeZone != "" {
		ref.Name = demoACMEIssuer
		out = append(out, mk("shop", "web-acme", "shop."+clusterName+"."+acmeZone))
	}
	return out
}

func runDemo(ctx context.Context, out io.Writer, d demoOptions) (err error) {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", "certhub-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: d.downstreams, Progress: step})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping control planes")
		err = errors.Join(err, bed.Stop())
	}()

	if _, err := bed.CreateCAIssuer(ctx, "demo-ca"); err != nil {
		return err
	}
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			return err
		}
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(dir)
	if err != nil {
		return err
	}
	var acmeZone string
	var replicaArgs []string
	if d.acme {
		var ca *acmebed.Bed
		ca, replicaArgs, err = startDemoACME(ctx, bed)
		if ca != nil {
			defer func() { err = errors.Join(err, ca.Stop()) }()
		}
		if err != nil {
			return err
		}
		acmeZone = ca.Zone
		step("started an ACME CA (Pebble, %s) and DNS (BIND, %s, zone %s); ClusterIssuer %s orders from it, solving DNS-01 over RFC 2136 with a TSIG key kept in the hub",
			ca.DirectoryURL, ca.Nameserver, ca.Zone, demoACMEIssuer)
	}
	pol, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(demoPolicy(acmeZone)))
	if err != nil {
		return err
	}
	if err := bed.Hub.Client.Create(ctx, &unstructured.Unstructured{Object: pol}); err != nil {
		return fmt.Errorf("failed to create the demo IssuancePolicy: %w", err)
	}
	zones := "example.com"
	if acmeZone != "" {
		zones += " and *.<cluster>." + acmeZone
	}
	step("installed IssuancePolicy %q in the hub: each cluster may get *.<cluster>.%s only (replicas run with --default-policy=deny)", demoPolicy(acmeZone).Name, zones)
	replicas := map[string]*demoReplica{}
	defer func() {
		for _, r := range replicas {
			err = errors.Join(err, r.stop(syscall.SIGTERM))
		}
	}()
	for i := range d.replicas {
		r, err := startDemoReplica(ctx, d.certhub, dir, kubeconfig, fmt.Sprintf("certhub-%d", i), bed, d.verbose, replicaArgs...)
		if err != nil {
			return err
		}
		replicas[r.id] = r
	}
	step("started %d hub replicas as processes (--verbose shows their logs); they share the clusters by rendezvous hashing, fenced by Leases", d.replicas)

	if d.acme {
		if err := waitIssuerReady(ctx, bed.Hub.Client, demoACMEIssuer, d.timeout); err != nil {
			return fmt.Errorf("ClusterIssuer %s never registered its ACME account: %w", demoACMEIssuer, err)
		}
		step("ClusterIssuer %s is Ready: one ACME account, registered once, for every cluster", demoACMEIssuer)
	}
	var total int
	for _, cp := range bed.Downstreams {
		for _, crt := range demoCertificates(cp.Name, acmeZone) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crt.Namespace}}
			if err := client.IgnoreAlreadyExists(cp.Client.Create(ctx, ns)); err != nil {
				return fmt.Errorf("failed to create namespace in %s: %w", cp.Name, err)
			}
			if err := cp.Client.Create(ctx, crt); err != nil {
				return fmt.Errorf("failed to create Certificate in %s: %w", cp.Name, err)
			}
			total++
		}
	}
	denied := 0
	if len(bed.Downstreams) > 1 {
		if err := bed.Downstreams[0].Client.Create(ctx, demoDenied(bed.Downstreams[0].Name, bed.Downstreams[1].Name)); err != nil {
			return fmt.Errorf("failed to create Certificate in %s: %w", bed.Downstreams[0].Name, err)
		}
		denied++
	}
	step("applied %d Certificates to %d downstream clusters, and %d asking for another cluster's name; waiting for Ready (and PolicyDenied)", total, len(bed.Downstreams), denied)
	rows, err := waitDemoReady(ctx, bed, total, denied, d.timeout)
	if err != nil {
		printDemoTable(out, rows)
		return err
	}
	step("all %d Certificates Ready, %d denied by the issuance policy", total, denied)
	fmt.Fprintln(out)
	printDemoTable(out, rows)
	fmt.Fprintln(out)

	if len(replicas) < 2 {
		return nil
	}
	// Failover: stop the owner of the first cluster and watch another take over.
	first := bed.Downstreams[0]
	owner := demoOwner(ctx, bed, first.Name)
	victim := replicas[owner]
	if victim == nil {
		return fmt.Errorf("no running replica owns %s (owner %q)", first.Name, owner)
	}
	stopAt := time.Now()
	step("stopping %s (SIGTERM), which owns %s: it hands its clusters over before it exits", owner, first.Name)
	if err := victim.stop(syscall.SIGTERM); err != nil {
		return err
	}
	delete(replicas, owner)
	extra := demoCertificates(first.Name, "")[0]
	extra.Name, extra.Spec.SecretName = "after-failover", "after-failover-tls"
	if err := first.Client.Create(ctx, extra); err != nil {
		return fmt.Errorf("failed to create Certificate in %s: %w", first.Name, err)
	}
	total++
	rows, err = waitDemoReady(ctx, bed, total, denied, d.timeout)
	if err != nil {
		printDemoTable(out, rows)
		return err
	}
	step("%s is now served by %s: Certificate %s/%s issued %.1fs after the stop",
		first.Name, demoOwner(ctx, bed, first.Name), extra.Namespace, extra.Name, time.Since(stopAt).Seconds())
	fmt.Fprintln(out)
	printDemoTable(out, rows)
	fmt.Fprintln(out)
	step("certhub status --kubeconfig <hub>:")
	status := exec.CommandContext(ctx, d.certhub, "status", "--kubeconfig", kubeconfig, "--namespace", bed.HubNamespace(),
		"--cluster-secret-namespace", bed.ArgoNamespace(), "--timeout", "5s")
	status.Stdout, status.Stderr = out, out
	if err := status.Run(); err != nil {
		return fmt.Errorf("certhub status: %w", err)
	}
	fmt.Fprintln(out)
	return nil
}

// certhubBinary is the certhub binary to run: flag, else beside this
// command (make builds both into bin/), else on $PATH.
func certhubBinary(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		if beside := filepath.Join(filepath.Dir(self), "certhub"); fileExists(beside) {
			return beside, nil
		}
	}
	p, err := exec.LookPath("certhub")
	if err != nil {
		return "", fmt.Errorf("no certhub binary beside certhub-demo nor on $PATH (make build; or --certhub): %w", err)
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// demoReplica is one `certhub run` child process.
type demoReplica struct {
	id   string
	cmd  *exec.Cmd
	done chan error
}

func startDemoReplica(_ context.Context, certhub, dir, kubeconfig, id string, bed *testbed.Bed, verbose bool, args ...string) (*demoReplica, error) {
	self := certhub
	logf, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "run", "--kubeconfig", kubeconfig, "--identity", id,
		"--namespace", bed.HubNamespace(), "--cluster-secret-namespace", bed.ArgoNamespace(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--default-policy", "deny",
		"--shard-lease-duration", "4s", "--shard-renew-deadline", "3s", "--shard-retry-period", "500ms", "--shard-renew-interval", "1s")
	cmd.Args = append(cmd.Args, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if verbose {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(logf, os.Stderr), io.MultiWriter(logf, os.Stderr)
	}
	// Children die with the demo, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("failed to start replica %s: %w", id, err)
	}
	r := &demoReplica{id: id, cmd: cmd, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait(); logf.Close() }()
	return r, nil
}

// stop signals the replica and waits for it (SIGKILL after 20s).
func (r *demoReplica) stop(sig syscall.Signal) error {
	_ = r.cmd.Process.Signal(sig)
	select {
	case err := <-r.done:
		if err != nil && sig != syscall.SIGKILL {
			return fmt.Errorf("replica %s exited with %w", r.id, err)
		}
		return nil
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		return errors.Join(fmt.Errorf("replica %s did not stop within 20s and was killed", r.id), <-r.done)
	}
}

// demoOwner is the replica holding cluster's fence, or "" if none (or unknown).
func demoOwner(ctx context.Context, bed *testbed.Bed, cluster string) string {
	owners, err := hub.ReadOwners(ctx, bed.Hub.Client, bed.HubNamespace())
	if err != nil {
		return ""
	}
	return owners.Owner(cluster)
}

// waitDemoReady waits until total Certificates are Ready and denied are
// Ready=False/PolicyDenied.
func waitDemoReady(ctx context.Context, bed *testbed.Bed, total, denied int, timeout time.Duration) ([]demoRow, error) {
	var rows []demoRow
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		rows = rows[:0]
		owners, err := hub.ReadOwners(ctx, bed.Hub.Client, bed.HubNamespace())
		if err != nil {
			return false, nil // transient; keep polling
		}
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list); err != nil {
				return false, nil // transient; keep polling
			}
			for i := range list.Items {
				crt := &list.Items[i]
				writer := "-"
				s := &corev1.Secret{}
				if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err == nil {
					writer = s.Annotations[hubapi.WrittenByAnnotation]
				}
				rows = append(rows, demoRow{cluster: cp.Name, crt: crt, owner: owners.Owner(cp.Name), writer: writer})
			}
		}
		ready, refused := 0, 0
		for _, r := range rows {
			if r.ready() {
				ready++
			}
			if _, reason := r.condition(); reason == reasons.PolicyDenied {
				refused++
			}
		}
		return ready == total && refused == denied, nil
	})
	if err != nil {
		return rows, fmt.Errorf("not all Certificates became Ready within %s: %w", timeout, err)
	}
	return rows, nil
}

type demoRow struct {
	cluster, owner, writer string
	crt                    *cmapi.Certificate
}

func (r demoRow) ready() bool {
	status, _ := r.condition()
	return status == cmmeta.ConditionTrue
}

// condition is the Ready condition's status and reason.
func (r demoRow) condition() (cmmeta.ConditionStatus, string) {
	for _, c := range r.crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady {
			return c.Status, c.Reason
		}
	}
	return cmmeta.ConditionUnknown, ""
}

func printDemoTable(out io.Writer, rows []demoRow) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tOWNER\tCERTIFICATE\tREADY\tREASON\tSECRET\tWRITTEN BY\tNOT AFTER\tISSUER")
	for _, r := range rows {
		notAfter := "-"
		if r.crt.Status.NotAfter != nil {
			notAfter = r.crt.Status.NotAfter.UTC().Format(time.RFC3339)
		}
		status, reason := r.condition()
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\n", r.cluster, r.owner, r.crt.Namespace, r.crt.Name, status, reason,
			r.crt.Spec.SecretName, r.writer, notAfter, r.crt.Spec.IssuerRef.Kind, r.crt.Spec.IssuerRef.Name)
	}
	_ = tw.Flush()
}
