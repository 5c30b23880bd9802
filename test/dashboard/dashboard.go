// Package dashboard builds certhub's Grafana dashboard with Grafana's own
// types and builders (grafana-foundation-sdk), so a panel cannot name a
// field Grafana does not have; `make dashboard` writes it to
// examples/grafana-dashboard.json, and its test checks the file is the
// build's output and every series it queries is one the hub exposes.
package dashboard

import (
	"encoding/json"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's uid.
const UID = "certhub-fleet"

var ds = dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend)
}

func instant(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).Instant().Format(prometheus.PromQueryFormatTable)
}

func series(title, desc, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(ds).Height(8).Span(12)
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

// Build returns the dashboard: fleet expiry, renewal waves and the
// budgets, rotation and revocation, and the health of every cluster.
//
// The SDK marks the classic dashboard model deprecated in favour of
// dashboardv2, which only Grafana 12's v2 API imports; the classic JSON is
// what every Grafana (UI import, provisioning, grafana-operator) reads.
func Build() (dashboard.Dashboard, error) { //nolint:staticcheck // the classic model on purpose (above)
	const sel = `cluster=~"$cluster"`
	b := dashboard.NewDashboardBuilder("certhub: the fleet's certificates") //nolint:staticcheck // the classic model on purpose (above)
	return b.Uid(UID).
		Description("Every certificate in the fleet, whoever issued it: expiry by cluster, renewal waves and the issuance budgets, CA rotation and revocation progress, per-cluster health. Built with grafana-foundation-sdk by test/dashboard (make dashboard).").
		Tags([]string{"certhub", "cert-manager", "tls"}).
		Refresh("1m").
		Time("now-24h", "now").
		Timezone(common.TimeZoneUtc).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("cluster").Label("Cluster").Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(certhub_cluster_reachable, cluster)`)}).
			Multi(true).IncludeAll(true).AllValue(".*").Refresh(dashboard.VariableRefreshOnTimeRangeChanged)).
		WithRow(dashboard.NewRowBuilder("Fleet expiry")).
		WithPanel(heatmap.NewPanelBuilder().Title("Days to expiry of the hub's certificates that need a look").
			Description("Each certificate certhub issued that is not Ready, past its renewal time or expiring within 7 days (every one with --certificate-metrics=all), by days left before notAfter.").
			Datasource(ds).Height(8).Span(12).Calculate(true).
			WithTarget(query(`(certhub_certificate_expiration_timestamp_seconds{`+sel+`} - time()) / 86400`, "{{cluster}}/{{namespace}}/{{name}}"))).
		WithPanel(series("Soonest expiry by cluster", "Days until the first certificate of each cluster expires: the hub's own, and every other TLS certificate discovery found (cert-manager's and unmanaged ones).", "d",
			query(`min by (cluster) (certhub_cluster_soonest_expiration_timestamp_seconds{`+sel+`} - time()) / 86400`, "{{cluster}} (certhub)"),
			query(`min by (cluster) (certhub_discovered_certificate_expiration_timestamp_seconds{`+sel+`} - time()) / 86400`, "{{cluster}} (others found)"))).
		WithPanel(table.NewPanelBuilder().Title("Discovered certificates expiring first").
			Description("Every TLS Secret in the fleet certhub did not write; managed none: nobody renews it. certhub status --discovered lists them with issuer, key and problems.").
			Datasource(ds).Height(8).Span(12).Unit("d").
			WithTarget(instant(`bottomk(25, (certhub_discovered_certificate_expiration_timestamp_seconds{` + sel + `} - time()) / 86400)`))).
		WithPanel(stat.NewPanelBuilder().Title("Discovered problems").
			Description("Expired, ExpiredServed (an Ingress still names it), WeakKey (RSA < 2048), SHA1Signature, Unparseable.").
			Datasource(ds).Height(8).Span(12).
			WithTarget(query(`sum by (problem) (certhub_discovered_certificate_problems{`+sel+`})`, "{{problem}}"))).
		WithRow(dashboard.NewRowBuilder("Renewal waves and budgets")).
		WithPanel(series("Issuances", "Certificates issued per second, by result.", "ops",
			query(`sum by (result) (rate(certhub_certificate_issuances_total{`+sel+`}[$__rate_interval]))`, "{{result}}"))).
		WithPanel(series("Waiting for the issuance budget", "Certificates starting to wait for --issuance-rate, per second, by cluster: a storm being flattened.", "ops",
			query(`sum by (cluster) (rate(certhub_certificate_budget_waits_total{`+sel+`}[$__rate_interval]))`, "{{cluster}}"))).
		WithPanel(series("ACME budget left", "Tokens left in each ACME ClusterIssuer's shared rate-limit buckets (orders, and per registered domain).", "short",
			query(`min by (issuer, limit) (certhub_acme_budget_remaining)`, "{{issuer}} {{limit}}"))).
		WithPanel(series("ACME orders", "Orders per second at each ACME CA, by result.", "ops",
			query(`sum by (issuer, result) (rate(certhub_acme_orders_total[$__rate_interval]))`, "{{issuer}} {{result}}"))).
		WithRow(dashboard.NewRowBuilder("CA rotation and revocation")).
		WithPanel(stat.NewPanelBuilder().Title("CA rotation wave").
			Description("The wave each rotating CA rolls (0 before the first, waves+1 after the last).").
			Datasource(ds).Height(6).Span(8).
			WithTarget(query(`max by (issuer) (certhub_ca_rotation_wave)`, "{{issuer}}"))).
		WithPanel(stat.NewPanelBuilder().Title("Rotation halted, and certificates that cannot move").
			Datasource(ds).Height(6).Span(8).
			WithTarget(query(`max by (issuer) (certhub_ca_rotation_halted)`, "{{issuer}} halted")).
			WithTarget(query(`max by (issuer) (certhub_ca_rotation_stuck_certificates)`, "{{issuer}} stuck"))).
		WithPanel(series("Revocations pending", "Certificates each CertificateRevocation still has to renew and revoke.", "short",
			query(`max by (revocation) (certhub_revocation_pending_certificates{phase="InProgress"})`, "{{revocation}}")).Span(8).Height(6)).
		WithRow(dashboard.NewRowBuilder("Per-cluster health")).
		WithPanel(statetimeline.NewPanelBuilder().Title("Reachable").
			Description("1: the hub reaches the cluster with its registered credentials.").
			Datasource(ds).Height(8).Span(12).
			WithTarget(query(`max by (cluster) (certhub_cluster_reachable{`+sel+`})`, "{{cluster}}"))).
		WithPanel(table.NewPanelBuilder().Title("Certificates ready, not ready and in violation").
			Datasource(ds).Height(8).Span(12).
			WithTarget(instant(`sum by (cluster) (certhub_certificates{ready="True",` + sel + `})`)).
			WithTarget(instant(`sum by (cluster) (certhub_certificates{ready="False",` + sel + `})`)).
			WithTarget(instant(`sum by (cluster) (certhub_certificate_policy_violations{` + sel + `})`))).
		WithPanel(series("cert-manager still active (ClusterConflict)", "1 while cert-manager is active in a cluster the hub should issue in.", "short",
			query(`max by (cluster) (certhub_cluster_conflict{`+sel+`})`, "{{cluster}}"))).
		WithPanel(statetimeline.NewPanelBuilder().Title("DR standbys ready").
			Description("1: the standby cluster holds a ready certificate for every selected Certificate of its primary (certhub status --standbys).").
			Datasource(ds).Height(8).Span(12).
			WithTarget(query(`max by (standby, primary) (certhub_standby_ready)`, "{{standby}} for {{primary}}"))).
		WithPanel(series("Clusters owned per replica", "The clusters each replica writes to (fences held); a replica lost shows as its share moving to the others.", "short",
			query(`max by (instance) (certhub_shard_owned_clusters)`, "{{instance}}"))).
		Build()
}

// JSON is the dashboard as examples/grafana-dashboard.json holds it.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	raw, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(raw, '\n'), nil
}
