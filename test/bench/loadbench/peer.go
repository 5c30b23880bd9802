package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Peer is the same work done the way a fleet does it without the hub:
// cert-manager v1.21's own controllers (test/fixture/cmrunner) running in
// every downstream cluster, each with a CA ClusterIssuer holding one CA, on
// the bed P2 and P9 ran on, in the same run (the replicas stopped).
type Peer struct {
	Certs, Clusters int
	// IssuePerSec: Certificates created at once, as P2, until all Ready.
	IssueWallSeconds   float64            `json:"issueWallSeconds"`
	IssuePerSec        float64            `json:"issueCertsPerSecond"`
	IssueWritesPerCert float64            `json:"issueDownstreamWritesPerCertificate"`
	IssueCPUPerCert    map[string]float64 `json:"issueCpuSecondsPerCertificate"`
	// RenewPerSec: every one re-issued, as P9; cert-manager re-issues on
	// `cmctl renew` (status condition Issuing=True), not on a CA change.
	// First to last re-issued, as P9 counts.
	RenewWallSeconds float64 `json:"renewWallSeconds"`
	RenewPerSec      float64 `json:"renewCertsPerSecond"`
	// RenewFromTriggerSeconds: from the first renew asked to the last done.
	RenewFromTriggerSeconds float64            `json:"renewFromTriggerSeconds"`
	WritesPerCert           float64            `json:"renewDownstreamWritesPerCertificate"`
	WritesBy                map[string]float64 `json:"renewDownstreamWritesPerCertificateBy"`
	// CPUPerCert of the renewal; cert-manager runs inside the bench
	// process, so its CPU is the bench's.
	CPUPerCert map[string]float64 `json:"renewCpuSecondsPerCertificate"`
}

const (
	peerNS     = "peer"
	peerIssuer = "peer-ca"
	// peerCANamespace is cmrunner's default --cluster-resource-namespace.
	peerCANamespace = "cert-manager"
)

// peer runs cert-manager in every downstream cluster of bed and measures
// certs Certificates issued and then renewed. No replica may run meanwhile.
// The Certificates in namespace done (certhub's) are deleted first, or
// cert-manager would take them up too.
func peer(ctx context.Context, bed *testbed.Bed, dir, done string, certs int) (Peer, error) {
	p := Peer{Certs: certs, Clusters: len(bed.Downstreams)}
	caKey, _, caPEM, err := newCA("peer CA")
	if err != nil {
		return p, err
	}
	keyPEM, err := pki.EncodePrivateKey(caKey, cmapi.PKCS8)
	if err != nil {
		return p, err
	}
	runCtx, stopRunners := context.WithCancel(ctx)
	defer stopRunners()
	watchers := make([]*benchutil.ReadyWatcher, len(bed.Downstreams))
	for i, cp := range bed.Downstreams {
		if err := cp.Client.DeleteAllOf(ctx, &cmapi.Certificate{}, client.InNamespace(done)); err != nil {
			return p, err
		}
		for _, ns := range []string{peerNS, peerCANamespace} {
			if err := client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})); err != nil {
				return p, err
			}
		}
		if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peerIssuer, Namespace: peerCANamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: keyPEM}}); err != nil {
			return p, err
		}
		if err := cp.Client.Create(ctx, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: peerIssuer},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: peerIssuer}}}}); err != nil {
			return p, err
		}
		kubeconfig, err := cp.WriteKubeconfig(dir)
		if err != nil {
			return p, err
		}
		if _, err := cmrunner.Start(runCtx, cmrunner.Options{Kubeconfig: kubeconfig, NoLeaderElection: true}); err != nil {
			return p, fmt.Errorf("cert-manager in %s: %w", cp.Name, err)
		}
		if watchers[i], err = benchutil.WatchReady(ctx, cp.Config, peerNS); err != nil {
			return p, err
		}
	}
	if err := waitIssuersReady(ctx, bed); err != nil {
		return p, err
	}

	benchutil.Logf("peer: cert-manager in each of %d clusters; creating %d Certificates", len(bed.Downstreams), certs)
	issueBefore, err := requestsOf(ctx, bed)
	if err != nil {
		return p, err
	}
	cpuIssue, err := benchutil.CPUSeconds()
	if err != nil {
		return p, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(bed.Downstreams))
	for i, cp := range bed.Downstreams {
		wg.Go(func() {
			for j := i; j < certs; j += len(bed.Downstreams) {
				if err := cp.Client.Create(ctx, fixture.Certificate(peerNS, fmt.Sprintf("peer-%04d", j), peerIssuer)); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return p, err
		}
	}
	for j := range certs {
		select {
		case <-watchers[j%len(bed.Downstreams)].Wait(peerNS, fmt.Sprintf("peer-%04d", j)):
		case <-time.After(10 * time.Minute):
			return p, fmt.Errorf("cert-manager's Certificate peer-%04d never Ready", j)
		}
	}
	wall := time.Since(start)
	p.IssueWallSeconds, p.IssuePerSec = wall.Seconds(), float64(certs)/wall.Seconds()
	if cpuAfter, err := benchutil.CPUSeconds(); err == nil {
		p.IssueCPUPerCert = benchutil.CPUDelta(cpuIssue, cpuAfter, certs, cpuKinds...)
	}
	time.Sleep(2 * time.Second) // the last writes land before counting, as P2 counts
	issueAfter, err := requestsOf(ctx, bed)
	if err != nil {
		return p, err
	}
	p.IssueWritesPerCert, _ = benchutil.WritesPerCert(benchutil.Delta(issueBefore, issueAfter), certs)
	benchutil.Logf("peer: all %d Ready after %.1fs: %.1f certs/s", certs, wall.Seconds(), p.IssuePerSec)

	// The mass re-issue, as an operator asks cert-manager for one (cmctl
	// renew): Issuing=True on every Certificate.
	before, err := requestsOf(ctx, bed)
	if err != nil {
		return p, err
	}
	cpuBefore, err := benchutil.CPUSeconds()
	if err != nil {
		return p, err
	}
	benchutil.Logf("peer: renewing all %d (Issuing=True, as cmctl renew)", certs)
	triggered := time.Now()
	for i, cp := range bed.Downstreams {
		wg.Go(func() { errs[i] = renewAll(ctx, cp.Client) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return p, err
		}
	}
	renewed, err := waitRevision(ctx, bed, peerNS, certs, 2)
	if err != nil {
		return p, err
	}
	first, last := span(renewed)
	cpuAfter, err := benchutil.CPUSeconds()
	if err != nil {
		return p, err
	}
	p.CPUPerCert = benchutil.CPUDelta(cpuBefore, cpuAfter, certs, cpuKinds...)
	p.RenewWallSeconds, p.RenewFromTriggerSeconds = last.Sub(first).Seconds(), last.Sub(triggered).Seconds()
	if p.RenewWallSeconds > 0 {
		p.RenewPerSec = float64(certs-1) / p.RenewWallSeconds
	}
	time.Sleep(2 * time.Second) // the last writes land before counting, as P2 counts
	after, err := requestsOf(ctx, bed)
	if err != nil {
		return p, err
	}
	p.WritesPerCert, p.WritesBy = benchutil.WritesPerCert(benchutil.Delta(before, after), certs)
	benchutil.Logf("peer: %d re-issued in %.1fs after the first: %.1f certs/s, %.2f writes each %v", certs, p.RenewWallSeconds, p.RenewPerSec, p.WritesPerCert, p.WritesBy)
	return p, nil
}

// requestsOf sums the API request counters of every downstream API server.
func requestsOf(ctx context.Context, bed *testbed.Bed) (map[benchutil.Request]float64, error) {
	total := map[benchutil.Request]float64{}
	for _, cp := range bed.Downstreams {
		m, err := benchutil.Requests(ctx, cp.Config)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			total[k] += v
		}
	}
	return total, nil
}

// waitIssuersReady waits until cert-manager set Ready on the peer
// ClusterIssuer of every cluster.
func waitIssuersReady(ctx context.Context, bed *testbed.Bed) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, cp := range bed.Downstreams {
		for {
			ci := &cmapi.ClusterIssuer{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: peerIssuer}, ci); err == nil {
				ready := false
				for _, c := range ci.Status.Conditions {
					ready = ready || (c.Type == cmapi.IssuerConditionReady && c.Status == cmmeta.ConditionTrue)
				}
				if ready {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cert-manager never set Ready on ClusterIssuer %s in %s", peerIssuer, cp.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// renewAll sets Issuing=True on every Certificate in the peer namespace, as
// `cmctl renew` does.
func renewAll(ctx context.Context, c client.Client) error {
	list := &cmapi.CertificateList{}
	if err := c.List(ctx, list, client.InNamespace(peerNS)); err != nil {
		return err
	}
	now := metav1.Now()
	for i := range list.Items {
		crt := &list.Items[i]
		crt.Status.Conditions = append(crt.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing,
			Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered", LastTransitionTime: &now})
		if err := c.Status().Update(ctx, crt); err != nil {
			return fmt.Errorf("failed to renew %s: %w", crt.Name, err)
		}
	}
	return nil
}

// waitRevision polls until certs Certificates in namespace ns of every
// downstream cluster (the warm-up aside) have revision ≥ want and are Ready;
// it returns when each one was seen so, by cluster/name.
func waitRevision(ctx context.Context, bed *testbed.Bed, ns string, certs, want int) (map[string]time.Time, error) {
	done := map[string]time.Time{}
	deadline := time.Now().Add(20 * time.Minute)
	for len(done) < certs {
		if time.Now().After(deadline) {
			return done, fmt.Errorf("%d of %d re-issued after 20m", len(done), certs)
		}
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				continue
			}
			for i := range list.Items {
				c := &list.Items[i]
				key := cp.Name + "/" + c.Name
				if _, ok := done[key]; ok || c.Name == "warmup" {
					continue
				}
				if rev := c.Status.Revision; rev != nil && *rev >= want && fixture.IsReady(c) {
					done[key] = time.Now()
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return done, nil
}

// span is the first and the last of the times in done.
func span(done map[string]time.Time) (first, last time.Time) {
	for _, at := range done {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return first, last
}
