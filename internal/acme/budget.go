package acme

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/go-logr/logr"
	"golang.org/x/net/publicsuffix"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
)

// Limit names.
const (
	LimitOrders        = "orders"
	LimitDomain        = "domain"
	LimitSet           = "set"
	LimitAuthzFailures = "authz-failures"
)

// ReasonRateLimited is the Issuing=True reason of a Certificate waiting for
// its issuer's budget (certsync's own budget uses the same reason).
const ReasonRateLimited = "RateLimited"

// LetsEncryptProduction is Let's Encrypt's production directory.
const LetsEncryptProduction = "https://acme-v02.api.letsencrypt.org/directory"

// letsEncryptLimits are Let's Encrypt's production limits (letsencrypt.org
// "Rate Limits", 2026-08).
var letsEncryptLimits = map[string]budget.Limit{
	LimitOrders:        {Capacity: 300, Period: 3 * time.Hour},
	LimitDomain:        {Capacity: 50, Period: 7 * 24 * time.Hour},
	LimitSet:           {Capacity: 5, Period: 7 * 24 * time.Hour},
	LimitAuthzFailures: {Capacity: 5, Period: time.Hour},
}

// limits returns ci's budget; nil means none.
func limits(ci *cmapi.ClusterIssuer) (map[string]budget.Limit, error) {
	v, ok := ci.Annotations[hubapi.ACMELimitsAnnotation]
	if !ok {
		if strings.TrimSuffix(ci.Spec.ACME.Server, "/") == LetsEncryptProduction {
			return letsEncryptLimits, nil
		}
		return nil, nil
	}
	v = strings.TrimSpace(v)
	if v == "none" || v == "" {
		return nil, nil
	}
	out := map[string]budget.Limit{}
	for _, part := range strings.Split(v, ",") {
		name, spec, ok := strings.Cut(strings.TrimSpace(part), "=")
		count, period, ok2 := strings.Cut(spec, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("%s: %q is not <limit>=<count>/<period>", hubapi.ACMELimitsAnnotation, part)
		}
		switch name {
		case LimitOrders, LimitDomain, LimitSet, LimitAuthzFailures:
		default:
			return nil, fmt.Errorf("%s: unknown limit %q (orders, domain, set, authz-failures)", hubapi.ACMELimitsAnnotation, name)
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %s: count %q is not a number ≥ 1", hubapi.ACMELimitsAnnotation, name, count)
		}
		d, err := time.ParseDuration(strings.TrimSpace(period))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s: %s: period %q is not a positive duration", hubapi.ACMELimitsAnnotation, name, period)
		}
		out[name] = budget.Limit{Capacity: n, Period: d}
	}
	return out, nil
}

// draws are the tokens one new order of dnsNames takes: one order, one per
// registered domain, one for the exact set; and the authorization failure
// buckets of each name must not be empty.
func draws(lims map[string]budget.Limit, dnsNames []string) (take, check []budget.Draw) {
	if l, ok := lims[LimitOrders]; ok {
		take = append(take, budget.Draw{Bucket: LimitOrders, Limit: l})
	}
	if l, ok := lims[LimitDomain]; ok {
		var domains []string
		for _, n := range dnsNames {
			d := registeredDomain(n)
			if !slices.Contains(domains, d) {
				domains = append(domains, d)
				take = append(take, budget.Draw{Bucket: LimitDomain + ":" + d, Limit: l})
			}
		}
	}
	if l, ok := lims[LimitSet]; ok {
		take = append(take, budget.Draw{Bucket: LimitSet + ":" + setHash(dnsNames), Limit: l})
	}
	if l, ok := lims[LimitAuthzFailures]; ok {
		for _, n := range dnsNames {
			check = append(check, budget.Draw{Bucket: LimitAuthzFailures + ":" + strings.TrimPrefix(n, "*."), Limit: l})
		}
	}
	return take, check
}

// registeredDomain is the name's public suffix plus one label.
func registeredDomain(name string) string {
	name = strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(name), "*."), ".")
	if d, err := publicsuffix.EffectiveTLDPlusOne(name); err == nil {
		return d
	}
	return name
}

// setHash names an exact set of identifiers, order and case aside.
func setHash(names []string) string {
	s := make([]string, 0, len(names))
	for _, n := range names {
		s = append(s, strings.ToLower(n))
	}
	slices.Sort(s)
	s = slices.Compact(s)
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(sum[:8])
}

// LedgerPrefix + the ClusterIssuer's name is the hub ConfigMap of its budget.
const LedgerPrefix = "certhub-acme-budget-"

// DescribeBudget says, for `certhub status`, what is left of ci's budget:
// each bucket used so far with its tokens now, its capacity and refill,
// the buckets a CA's 429 paused, and how many issuances wait. "" when ci
// has no budget.
func DescribeBudget(ctx context.Context, hub client.Client, namespace string, ci *cmapi.ClusterIssuer, clk clock.PassiveClock) (string, error) {
	lims, err := limits(ci)
	if err != nil {
		return fmt.Sprintf("ACME budget of ClusterIssuer %s: invalid: %v", ci.Name, err), nil
	}
	if lims == nil {
		return "", nil
	}
	limitOf := func(bucket string) (budget.Limit, bool) {
		lim, ok := lims[budget.KindOf(bucket)]
		return lim, ok
	}
	d, err := budget.NewLedger(hub, hub, client.ObjectKey{Namespace: namespace, Name: LedgerPrefix + ci.Name}, clk).Snapshot(ctx, limitOf)
	if err != nil {
		return "", err
	}
	now := clk.Now()
	if _, ok := d.Buckets[LimitOrders]; !ok {
		if lim, ok := lims[LimitOrders]; ok {
			d.Buckets[LimitOrders] = &budget.Bucket{Tokens: d.Unstored(lim, now)} // full until the first order, unless the history is unknown
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(d.Buckets)) {
		b := d.Buckets[name]
		lim, ok := limitOf(name)
		if !ok {
			continue // a limit no longer configured
		}
		p := fmt.Sprintf("%s %.0f/%.0f (+1 per %s)", name, math.Floor(b.Tokens), lim.Capacity, (lim.Period / time.Duration(lim.Capacity)).Round(time.Second))
		if b.PausedUntil != nil && b.PausedUntil.After(now) {
			p += " paused by the CA until " + b.PausedUntil.UTC().Format(time.RFC3339)
		}
		parts = append(parts, p)
	}
	line := fmt.Sprintf("ACME budget of ClusterIssuer %s: %s", ci.Name, strings.Join(parts, ", "))
	if d.Since != nil {
		line += fmt.Sprintf("; spending before %s unknown: buckets not listed refill from empty since then", d.Since.UTC().Format(time.RFC3339))
	}
	var waiting int
	var nearest time.Time
	for _, w := range d.Waiting {
		if w.Expires.After(now) {
			waiting++
			if nearest.IsZero() || w.Due.Before(nearest) {
				nearest = w.Due
			}
		}
	}
	if waiting > 0 {
		line += fmt.Sprintf("; %d issuance(s) waiting, nearest due %s", waiting, nearest.UTC().Format(time.RFC3339))
	}
	return line, nil
}

// ledger returns the budget ledger of ci (a ConfigMap in the hub namespace).
func (s *Service) ledger(ci *cmapi.ClusterIssuer) *budget.Ledger {
	return budget.NewLedger(s.hub, s.live, client.ObjectKey{Namespace: s.opts.Namespace, Name: LedgerPrefix + ci.Name}, s.opts.Clock)
}

// admit takes the budget of a new order for cluster's namespace; it
// returns 0 when admitted, else how long to wait and which limit refused.
func (s *Service) admit(ctx context.Context, ci *cmapi.ClusterIssuer, key, cluster, namespace string, due time.Time, dnsNames []string) (time.Duration, string, error) {
	lims, err := limits(ci)
	if err != nil || lims == nil {
		return 0, "", err
	}
	take, check := draws(lims, dnsNames)
	for _, c := range check {
		c.Check = true // the failure buckets are looked at, not drawn from: a failure draws
		take = append(take, c)
	}
	tenant := budget.Tenant{Cluster: cluster, Namespace: namespace}
	if s.opts.Weight != nil {
		tenant.Weight = s.opts.Weight(cluster)
	}
	wait, refused, rem, err := s.ledger(ci).Take(ctx, key, tenant, due, take)
	if err != nil || wait > 0 {
		return wait, refused, err
	}
	for _, d := range take {
		if d.Bucket == LimitOrders || strings.HasPrefix(d.Bucket, LimitDomain+":") {
			s.metrics.budget.WithLabelValues(ci.Name, d.Bucket).Set(rem[d.Bucket])
		}
	}
	return 0, "", nil
}

// giveBack returns the tokens admit took for an order that was not
// created after all.
func (s *Service) giveBack(ctx context.Context, ci *cmapi.ClusterIssuer, dnsNames []string) {
	lims, err := limits(ci)
	if err != nil || lims == nil {
		return
	}
	take, _ := draws(lims, dnsNames)
	if err := s.ledger(ci).Give(ctx, take); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "failed to return the tokens of an order not created", "issuer", ci.Name)
	}
}

// failed draws one token of each name's authorization failure bucket.
func (s *Service) failed(ctx context.Context, ci *cmapi.ClusterIssuer, dnsNames []string) {
	lims, err := limits(ci)
	if err != nil || lims == nil {
		return
	}
	_, check := draws(lims, dnsNames)
	if len(check) == 0 {
		return
	}
	if err := s.ledger(ci).Spend(ctx, check); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "failed to record an authorization failure in the budget", "issuer", ci.Name)
	}
}

// pause stops, for every replica, the bucket a CA's 429 names (rateLimit)
// until its Retry-After (a minute without one); the account's orders only
// when the CA said so or said nothing we know.
func (s *Service) pause(ctx context.Context, ci *cmapi.ClusterIssuer, err *acmeapi.Error, dnsNames []string) (time.Duration, string) {
	wait := time.Minute
	if err.Header != nil {
		if v := err.Header.Get("Retry-After"); v != "" {
			if n, perr := strconv.Atoi(v); perr == nil {
				wait = time.Duration(n) * time.Second
			} else if t, perr := http.ParseTime(v); perr == nil {
				wait = t.Sub(s.opts.Clock.Now())
			}
		}
	}
	wait = max(wait, time.Second)
	name := rateLimit(err.Detail, dnsNames)
	lims, lerr := limits(ci)
	l, ok := lims[budget.KindOf(name)]
	if lerr != nil || !ok {
		l = budget.Limit{Capacity: 1, Period: time.Hour} // the CA limits what we keep no budget for: pause anyway
	}
	if perr := s.ledger(ci).Pause(ctx, budget.Draw{Bucket: name, Limit: l}, s.opts.Clock.Now().Add(wait)); perr != nil {
		logr.FromContextOrDiscard(ctx).Error(perr, "failed to pause the issuer's budget", "issuer", ci.Name, "bucket", name)
	}
	return wait, name
}

// paused is how long the CA's pause of any bucket an order of dnsNames
// draws from lasts (0: none): an order admitted before the CA's 429 waits
// for it too.
func (s *Service) paused(ctx context.Context, ci *cmapi.ClusterIssuer, dnsNames []string) time.Duration {
	buckets := []string{LimitOrders, LimitSet + ":" + setHash(dnsNames)}
	for _, n := range dnsNames {
		buckets = append(buckets, LimitDomain+":"+registeredDomain(n), LimitAuthzFailures+":"+strings.TrimPrefix(strings.ToLower(n), "*."))
	}
	wait, err := s.ledger(ci).Paused(ctx, buckets)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "failed to read the issuer's budget", "issuer", ci.Name)
	}
	return wait
}

// quoted finds the first "..." in a CA's problem detail.
var quoted = regexp.MustCompile(`"([^"]+)"`)

// rateLimit is the budget bucket a CA's rateLimited problem names, read as
// Let's Encrypt (Boulder) writes them ("too many certificates (5) already
// issued for this exact set of identifiers …", "too many certificates (50)
// already issued for \"example.com\" …", "too many failed authorizations
// (5) for \"a.example.com\" …", "too many new orders (300) …", each with a
// link to its section of the rate-limit documentation). A problem it cannot
// read pauses the account's orders.
func rateLimit(detail string, dnsNames []string) string {
	d := strings.ToLower(detail)
	name := ""
	if m := quoted.FindStringSubmatch(detail); m != nil {
		name = strings.ToLower(m[1])
	}
	switch {
	case strings.Contains(d, "exact set"):
		return LimitSet + ":" + setHash(dnsNames)
	case strings.Contains(d, "failed authorization") || strings.Contains(d, "authorization-failures"):
		if name != "" {
			return LimitAuthzFailures + ":" + strings.TrimPrefix(name, "*.")
		}
	case strings.Contains(d, "registered domain") || strings.Contains(d, "registered-domain") || strings.Contains(d, "already issued for"):
		if name != "" {
			return LimitDomain + ":" + registeredDomain(name)
		}
	}
	return LimitOrders
}
