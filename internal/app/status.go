package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/writegate"
)

// Cluster states shown by `certhub status`.
const (
	StateConnected    = "Connected"
	StateUnreachable  = "Unreachable"
	StateUnauthorized = "Unauthorized"
	StateInvalid      = "InvalidRegistration"
	// StateExecSkipped: the registration authenticates with an exec plugin,
	// which `certhub status` runs only with --allow-exec.
	StateExecSkipped = "ExecPluginNotRun"
)

// ClusterStatus is one row of `certhub status`.
type ClusterStatus struct {
	Cluster string `json:"cluster"`
	Secret  string `json:"secret"`
	Server  string `json:"server,omitempty"`
	Owner   string `json:"owner,omitempty"`
	// Mode is the cluster's certhub.io/mode ("?" after an unknown value,
	// read as observe); Conflict says why the hub does not write there
	// although the mode lets it (cert-manager active: ClusterConflict).
	Mode     string `json:"mode"`
	Conflict string `json:"conflict,omitempty"`
	State    string `json:"state"`
	Error    string `json:"error,omitempty"`
	// Warnings are what the registration's author may not expect (a name
	// no {{cluster}} pattern matches, a connection without credentials).
	Warnings      []string   `json:"warnings,omitempty"`
	Ready         int        `json:"ready"`
	Total         int        `json:"total"`
	SoonestExpiry *time.Time `json:"soonestExpiry,omitempty"`
	NextRenewal   *time.Time `json:"nextRenewal,omitempty"`
	LastWrite     *time.Time `json:"lastWrite,omitempty"`
	// Violations counts issued certificates the policies no longer allow.
	Violations int `json:"policyViolations,omitempty"`
	// Requests counts the CertificateRequests naming a hub issuer
	// (issuerRef.group certhub.io), by their Ready reason (Issued, Failed,
	// Denied, Pending; "Waiting" without one).
	Requests     map[string]int   `json:"certificateRequests,omitempty"`
	Certificates []CertificateRow `json:"certificates,omitempty"`
}

// CertificateRow is one Certificate in `certhub status --cluster`.
type CertificateRow struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Ready     string     `json:"ready"`
	Reason    string     `json:"reason,omitempty"`
	Secret    string     `json:"secret"`
	Issuer    string     `json:"issuer"`
	NotAfter  *time.Time `json:"notAfter,omitempty"`
	Renewal   *time.Time `json:"renewalTime,omitempty"`
	WrittenBy string     `json:"writtenBy,omitempty"`
	// PolicyViolation: the issued certificate is one the issuance policies
	// no longer allow (condition PolicyViolation=True; not revoked).
	PolicyViolation bool `json:"policyViolation,omitempty"`
}

type statusOptions struct {
	kubeconfig, namespace, secretNamespace, output, cluster string
	timeout                                                 time.Duration
	allowExec                                               bool
	// discovered lists discovery's certificates instead, filtered by
	// managed and sorted by sort.
	discovered    bool
	managed, sort string
	// standbys lists the DR pairs instead (internal/drpair).
	standbys bool
}

func newStatusCommand() *cobra.Command {
	o := statusOptions{namespace: hub.DefaultNamespace, secretNamespace: hub.DefaultClusterSecretNamespace, output: "table", timeout: 5 * time.Second,
		managed: managedAll, sort: "expiry"}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every registered cluster: owner replica, reachability, Certificates ready, expiry, renewal, last write",
		Long: `Read the hub (Argo CD cluster Secrets, certhub's fence Leases) and, with each
registration's own credentials, every downstream cluster's Certificates; print
one row per cluster. --cluster lists that cluster's Certificates like
'kubectl get certificate', with issuer and writing replica.

--discovered lists every TLS certificate found downstream instead, whoever
wrote it (certhub, cert-manager, or nobody: managed none), from the reports
the replicas keep in the hub: expiry, key, issuer, names and problems
(Expired, ExpiredServed, WeakKey, SHA1Signature, Unparseable).

--standbys lists the DR pairs (a cluster Secret labelled
certhub.io/standby-for=<primary>): whether each standby holds a ready
certificate for every selected Certificate of its primary, and (with
--cluster <standby>) the ones it does not, with the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadHubConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			if o.discovered {
				return runDiscovered(cmd.Context(), cmd.OutOrStdout(), cfg, o)
			}
			if o.standbys {
				return runStandbys(cmd.Context(), cmd.OutOrStdout(), cfg, o)
			}
			rows, err := collectStatus(cmd.Context(), cfg, o)
			if err != nil {
				return err
			}
			if err := printStatus(cmd.OutOrStdout(), rows, o); err != nil {
				return err
			}
			if o.output == "table" {
				if err := printRotations(cmd.Context(), cmd.OutOrStdout(), cfg, o.namespace); err != nil {
					return err
				}
				return printBudgets(cmd.Context(), cmd.OutOrStdout(), cfg, o.namespace)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	f.StringVar(&o.namespace, "namespace", o.namespace, "Hub namespace of certhub's Leases")
	f.StringVar(&o.secretNamespace, "cluster-secret-namespace", o.secretNamespace, "Hub namespace holding Argo CD cluster Secrets")
	f.StringVarP(&o.output, "output", "o", o.output, "table, json or yaml")
	f.StringVar(&o.cluster, "cluster", o.cluster, "Show this cluster's Certificates")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "Per-cluster timeout for reaching downstream API servers")
	f.BoolVar(&o.discovered, "discovered", false, "List every TLS certificate discovery found downstream (certhub's, cert-manager's and unmanaged ones)")
	f.BoolVar(&o.standbys, "standbys", false, "List the DR pairs: whether each standby cluster is ready to take over its primary's certificates")
	f.StringVar(&o.managed, "managed", o.managed, "With --discovered: all, managed (certhub or cert-manager), unmanaged, certhub, cert-manager or none")
	f.StringVar(&o.sort, "sort", o.sort, "With --discovered: expiry (soonest first) or cluster")
	f.BoolVar(&o.allowExec, "allow-exec", false, "Run the exec credential plugins registrations name (a cluster Secret's writer chooses the program); without it such clusters are listed as "+StateExecSkipped)
	return cmd
}

func loadHubConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("failed to load hub kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load hub kubeconfig: %w", err)
	}
	return cfg, nil
}

// collectStatus builds the rows: one per cluster Secret, sorted by cluster.
func collectStatus(ctx context.Context, cfg *rest.Config, o statusOptions) ([]ClusterStatus, error) {
	scheme, err := hub.NewScheme()
	if err != nil {
		return nil, err
	}
	hubc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create hub client: %w", err)
	}
	return statusRows(ctx, hubc, scheme, o)
}

// runDiscovered prints `certhub status --discovered`.
func runDiscovered(ctx context.Context, w io.Writer, cfg *rest.Config, o statusOptions) error {
	hubc, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("failed to create hub client: %w", err)
	}
	now := time.Now()
	s, err := collectDiscovered(ctx, hubc, o, now)
	if err != nil {
		return err
	}
	return printDiscovered(w, s, o.output, now)
}

// statusRows reads the registrations and fence owners from hub and inspects
// each cluster with its own credentials.
func statusRows(ctx context.Context, hubc client.Reader, scheme *runtime.Scheme, o statusOptions) ([]ClusterStatus, error) {
	secrets := &corev1.SecretList{}
	if err := hubc.List(ctx, secrets, client.InNamespace(o.secretNamespace), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		return nil, fmt.Errorf("failed to list cluster Secrets in %s: %w", o.secretNamespace, err)
	}
	owners, err := hub.ReadOwners(ctx, hubc, o.namespace)
	if err != nil {
		return nil, err
	}
	reports, err := writegate.ReadReports(ctx, hubc, o.namespace)
	if err != nil {
		return nil, err
	}
	var rows []ClusterStatus
	for i := range secrets.Items {
		s := &secrets.Items[i]
		row := ClusterStatus{Secret: s.Namespace + "/" + s.Name, Cluster: string(s.Data["name"]), Owner: "-"}
		row.Mode, row.Conflict = clusterMode(s, reports, row.Cluster)
		c, err := inventory.ParseSecret(s)
		if err != nil {
			if row.Cluster == "" {
				row.Cluster = row.Secret
			}
			row.State, row.Error = StateInvalid, err.Error()
			if o.cluster == "" || o.cluster == row.Cluster {
				rows = append(rows, row)
			}
			continue
		}
		if o.cluster != "" && o.cluster != c.Name {
			continue
		}
		row.Cluster, row.Server, row.Warnings = c.Name, c.Server, c.Warnings
		row.Mode, row.Conflict = clusterMode(s, reports, c.Name)
		if owner := owners.Owner(c.Name); owner != "" {
			row.Owner = owner
		}
		inspectCluster(ctx, scheme, c, o, &row)
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Cluster < rows[j].Cluster })
	return rows, nil
}

// inspectCluster fills the downstream columns of row using the registration's credentials.
func inspectCluster(ctx context.Context, scheme *runtime.Scheme, c *inventory.Cluster, o statusOptions, row *ClusterStatus) {
	if c.Config.ExecProvider != nil && !o.allowExec {
		row.State, row.Error = StateExecSkipped, fmt.Sprintf("authenticates with exec plugin %q; certhub status runs it only with --allow-exec", c.Config.ExecProvider.Command)
		return
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Timeout = o.timeout
	// Certificates unstructured, decoded one by one: one the typed API cannot
	// decode must not hide the others.
	list := certspec.NewList()
	dc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err == nil {
		var parts []*unstructured.UnstructuredList
		parts, err = listScoped(ctx, dc, c.Namespaces, certspec.NewList)
		for _, p := range parts {
			list.Items = append(list.Items, p.Items...)
		}
	}
	if err != nil {
		row.State, row.Error = StateUnreachable, err.Error()
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			row.State = StateUnauthorized
		}
		return
	}
	row.State = StateConnected
	countRequests(ctx, dc, c.Namespaces, row)
	written := map[string]string{}
	// Secret metadata only: status never reads a private key.
	secretList := func() *metav1.PartialObjectMetadataList {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
		return l
	}
	parts, err := listScoped(ctx, dc, c.Namespaces, secretList, client.MatchingLabels{hubapi.ManagedByLabel: hubapi.ManagedByValue})
	var secrets []metav1.PartialObjectMetadata
	for _, p := range parts {
		secrets = append(secrets, p.Items...)
	}
	if err == nil {
		for _, s := range secrets {
			written[s.Namespace+"/"+s.Name] = s.Annotations[hubapi.WrittenByAnnotation]
			for _, mf := range s.ManagedFields {
				if mf.Manager == certsync.FieldManager && mf.Time != nil && (row.LastWrite == nil || mf.Time.After(*row.LastWrite)) {
					t := mf.Time.Time
					row.LastWrite = &t
				}
			}
		}
	}
	for i := range list.Items {
		row.Total++
		crt := &cmapi.Certificate{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, crt); err != nil {
			u := &list.Items[i]
			if o.cluster != "" {
				row.Certificates = append(row.Certificates, CertificateRow{Namespace: u.GetNamespace(), Name: u.GetName(), Ready: "False", Reason: "Undecodable"})
			}
			continue
		}
		cr := CertificateRow{Namespace: crt.Namespace, Name: crt.Name, Ready: "Unknown", Secret: crt.Spec.SecretName,
			Issuer: crt.Spec.IssuerRef.Kind + "/" + crt.Spec.IssuerRef.Name, WrittenBy: written[crt.Namespace+"/"+crt.Spec.SecretName]}
		for _, cond := range crt.Status.Conditions {
			switch cond.Type {
			case cmapi.CertificateConditionReady:
				cr.Ready, cr.Reason = string(cond.Status), cond.Reason
				if cond.Status == cmmeta.ConditionTrue {
					row.Ready++
				}
			case certsync.ConditionPolicyViolation:
				if cond.Status == cmmeta.ConditionTrue {
					cr.PolicyViolation = true
					row.Violations++
				}
			}
		}
		if na := crt.Status.NotAfter; na != nil {
			t := na.Time
			cr.NotAfter = &t
			if row.SoonestExpiry == nil || t.Before(*row.SoonestExpiry) {
				row.SoonestExpiry = &t
			}
		}
		if rt := crt.Status.RenewalTime; rt != nil {
			t := rt.Time
			cr.Renewal = &t
			if row.NextRenewal == nil || t.Before(*row.NextRenewal) {
				row.NextRenewal = &t
			}
		}
		if o.cluster != "" {
			row.Certificates = append(row.Certificates, cr)
		}
	}
}

// listScoped lists across the cluster, or, for a registration scoped to
// namespaces (Argo CD's `namespaces`), in each of them: one list (from
// newList) per namespace.
func listScoped[L client.ObjectList](ctx context.Context, c client.Reader, namespaces []string, newList func() L, opts ...client.ListOption) ([]L, error) {
	if len(namespaces) == 0 {
		l := newList()
		return []L{l}, c.List(ctx, l, opts...)
	}
	out := make([]L, 0, len(namespaces))
	for _, ns := range namespaces {
		l := newList()
		if err := c.List(ctx, l, append(opts, client.InNamespace(ns))...); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// countRequests fills row.Requests; a registration that may not list
// CertificateRequests leaves it empty.
func countRequests(ctx context.Context, c client.Reader, namespaces []string, row *ClusterStatus) {
	parts, err := listScoped(ctx, c, namespaces, func() *cmapi.CertificateRequestList { return &cmapi.CertificateRequestList{} })
	if err != nil {
		return
	}
	list := &cmapi.CertificateRequestList{}
	for _, p := range parts {
		list.Items = append(list.Items, p.Items...)
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if !crsign.ForHub(cr) {
			continue
		}
		if row.Requests == nil {
			row.Requests = map[string]int{}
		}
		reason := apiutil.CertificateRequestReadyReason(cr)
		if reason == "" {
			reason = "Waiting"
		}
		row.Requests[reason]++
	}
}

// requestsLine is "CertificateRequests for the hub: 5 Issued, 1 Failed".
func requestsLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return "CertificateRequests signed by the hub (issuerRef.group certhub.io): " + strings.Join(parts, ", ")
}

// printRotations prints one line per CA rotation in progress (their state
// ConfigMaps in the hub namespace).
func printRotations(ctx context.Context, w io.Writer, cfg *rest.Config, namespace string) error {
	hubc, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	cms := &corev1.ConfigMapList{}
	if err := hubc.List(ctx, cms, client.InNamespace(namespace), client.MatchingLabels{rotation.StateLabel: "true"}); err != nil {
		return fmt.Errorf("failed to list CA rotations: %w", err)
	}
	for _, line := range rotationLines(cms.Items) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// printBudgets prints what is left of each ACME ClusterIssuer's budget.
func printBudgets(ctx context.Context, w io.Writer, cfg *rest.Config, namespace string) error {
	scheme := runtime.NewScheme()
	if err := cmapi.AddToScheme(scheme); err != nil {
		return err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	hubc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	issuers := &cmapi.ClusterIssuerList{}
	if err := hubc.List(ctx, issuers); err != nil {
		return fmt.Errorf("failed to list ClusterIssuers: %w", err)
	}
	for i := range issuers.Items {
		ci := &issuers.Items[i]
		if ci.Spec.ACME == nil {
			continue
		}
		line, err := acme.DescribeBudget(ctx, hubc, namespace, ci, clock.RealClock{})
		if err != nil {
			return fmt.Errorf("failed to read the budget of ClusterIssuer %s: %w", ci.Name, err)
		}
		if line != "" {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// rotationLines are "CA rotation of ClusterIssuer X: Halted, wave 2/3, 340/1000 re-issued: …".
func rotationLines(cms []corev1.ConfigMap) []string {
	var out []string
	for i := range cms {
		s := rotation.StateFrom(&cms[i])
		out = append(out, fmt.Sprintf("CA rotation of ClusterIssuer %s to Secret %s: %s", s.Issuer, s.Next, s))
	}
	sort.Strings(out)
	return out
}

func printStatus(w io.Writer, rows []ClusterStatus, o statusOptions) error {
	if done, err := printStructured(w, o.output, rows); done {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	if o.cluster != "" {
		if len(rows) == 0 {
			return fmt.Errorf("no cluster %q is registered", o.cluster)
		}
		r := rows[0]
		fmt.Fprintf(tw, "cluster %s (%s), owner %s, mode %s, %s %s\n", r.Cluster, r.Server, r.Owner, r.Mode, r.State, r.Error)
		if r.Conflict != "" {
			fmt.Fprintf(tw, "%s: %s\n", writegate.ReasonClusterConflict, r.Conflict)
		}
		for _, w := range r.Warnings {
			fmt.Fprintf(tw, "warning: %s\n", w)
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tREASON\tPOLICY\tSECRET\tISSUER\tEXPIRATION\tRENEWAL\tWRITTEN BY")
		for _, c := range r.Certificates {
			pol := "-"
			if c.PolicyViolation {
				pol = "VIOLATION"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Namespace, c.Name, c.Ready, c.Reason, pol, c.Secret, c.Issuer, ts(c.NotAfter), ts(c.Renewal), c.WrittenBy)
		}
		if r.Violations > 0 {
			fmt.Fprintf(tw, "\n%d issued certificate(s) violate the current issuance policies (not revoked; their renewal will be denied)\n", r.Violations)
		}
		if len(r.Requests) > 0 {
			fmt.Fprintf(tw, "\n%s\n", requestsLine(r.Requests))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "CLUSTER\tOWNER\tMODE\tSTATE\tREADY\tSOONEST EXPIRY\tNEXT RENEWAL\tLAST WRITE\tERROR")
	for _, r := range rows {
		msg, mode := r.Error, r.Mode
		if r.Conflict != "" {
			mode += "/" + writegate.ReasonClusterConflict
			msg = strings.TrimPrefix(msg+"; ", "; ") + r.Conflict
		}
		for _, w := range r.Warnings {
			msg = strings.TrimPrefix(msg+"; ", "; ") + "warning: " + w
		}
		if len(msg) > 80 {
			msg = msg[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", r.Cluster, r.Owner, mode, r.State, r.Ready, r.Total,
			ts(r.SoonestExpiry), ts(r.NextRenewal), ts(r.LastWrite), strings.ReplaceAll(msg, "\n", " "))
	}
	return tw.Flush()
}
