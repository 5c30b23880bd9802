package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/spf13/cobra"
	uzap "go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/testbed"
)

// demoOptions configure `certhub demo`.
type demoOptions struct {
	downstreams int
	timeout     time.Duration
	verbose     bool
}

func newDemoCommand() *cobra.Command {
	d := demoOptions{downstreams: 2, timeout: 3 * time.Minute}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the hub on local control planes and issue example Certificates",
		Long: `Run certhub end to end on this machine, with no cluster and no Docker:

  1. start a hub and --clusters downstream control planes (real kube-apiserver
     + etcd, built from Go modules by hack/ensure-envtest-assets.sh; found via
     $KUBEBUILDER_ASSETS or the envtest cache),
  2. create a CA ClusterIssuer in the hub (its key stays in the hub),
  3. register each downstream cluster as an Argo CD cluster Secret in the hub,
  4. run the hub controller,
  5. apply example Certificates in every downstream cluster,
  6. wait until all are Ready and print a table of what was issued.

Everything is stopped and removed on exit and on Ctrl-C. 'make demo' builds
the binaries and runs this.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := uzap.ErrorLevel
			if d.verbose {
				level = uzap.InfoLevel
			}
			ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
			return runDemo(ctrl.SetupSignalHandler(), cmd.OutOrStdout(), d)
		},
	}
	cmd.Flags().IntVar(&d.downstreams, "clusters", d.downstreams, "Number of downstream clusters")
	cmd.Flags().DurationVar(&d.timeout, "timeout", d.timeout, "Give up when the Certificates are not Ready after this long")
	cmd.Flags().BoolVarP(&d.verbose, "verbose", "v", d.verbose, "Show the hub's logs")
	return cmd
}

// demoCertificates are applied to every downstream cluster.
func demoCertificates(clusterName string) []*cmapi.Certificate {
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
	return []*cmapi.Certificate{
		mk("shop", "web", "shop."+clusterName+".example.com"),
		mk("payments", "api", "api.payments."+clusterName+".example.com", "payments.svc.cluster.local"),
	}
}

func runDemo(ctx context.Context, out io.Writer, d demoOptions) (err error) {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

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

	hubCtx, stopHub := context.WithCancel(ctx)
	hubDone := make(chan error, 1)
	o := NewOptions()
	o.Namespace, o.ClusterSecretNamespace = bed.HubNamespace(), bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "certhub-0"
	go func() { hubDone <- Run(hubCtx, bed.Hub.Config, o) }()
	defer func() {
		stopHub()
		err = errors.Join(err, <-hubDone)
	}()
	step("hub replica %s running (reads cluster Secrets in %s/, issuers in the hub)", o.Identity, o.ClusterSecretNamespace)

	var total int
	for _, cp := range bed.Downstreams {
		for _, crt := range demoCertificates(cp.Name) {
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
	step("applied %d Certificates to %d downstream clusters; waiting for Ready", total, len(bed.Downstreams))

	var rows []demoRow
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, d.timeout, true, func(ctx context.Context) (bool, error) {
		rows = rows[:0]
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list); err != nil {
				return false, nil // transient; keep polling
			}
			for i := range list.Items {
				rows = append(rows, demoRow{cluster: cp.Name, crt: &list.Items[i]})
			}
		}
		ready := 0
		for _, r := range rows {
			if r.ready() {
				ready++
			}
		}
		return ready == total, nil
	})
	if err != nil {
		printDemoTable(out, rows)
		return fmt.Errorf("not all Certificates became Ready within %s: %w", d.timeout, err)
	}
	step("all %d Certificates Ready", total)
	fmt.Fprintln(out)
	printDemoTable(out, rows)
	fmt.Fprintln(out)
	return nil
}

type demoRow struct {
	cluster string
	crt     *cmapi.Certificate
}

func (r demoRow) ready() bool {
	for _, c := range r.crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}

func printDemoTable(out io.Writer, rows []demoRow) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tCERTIFICATE\tREADY\tSECRET\tNOT AFTER\tISSUER")
	for _, r := range rows {
		notAfter := "-"
		if r.crt.Status.NotAfter != nil {
			notAfter = r.crt.Status.NotAfter.UTC().Format(time.RFC3339)
		}
		ready := "False"
		if r.ready() {
			ready = "True"
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%s/%s\n", r.cluster, r.crt.Namespace, r.crt.Name, ready,
			r.crt.Spec.SecretName, notAfter, r.crt.Spec.IssuerRef.Kind, r.crt.Spec.IssuerRef.Name)
	}
	_ = tw.Flush()
}
