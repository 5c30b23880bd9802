package issued

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// benchEntries is n entries as the hub records them: a leaf of two DNS
// names signed by a CA; ordered ones carry their DER (ACME).
func benchEntries(b *testing.B, n int, ordered bool) []Entry {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]Entry, n)
	for i := range n {
		tmpl := &x509.Certificate{SerialNumber: new(big.Int).Lsh(big.NewInt(int64(i+1)), 100), Subject: pkix.Name{CommonName: fmt.Sprintf("svc-%05d.apps.example.com", i)},
			DNSNames:  []string{fmt.Sprintf("svc-%05d.apps.example.com", i), fmt.Sprintf("svc-%05d.apps.svc.cluster.local", i)},
			NotBefore: t0, NotAfter: t0.Add(90 * 24 * time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			b.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		e := For(leaf, ClusterIssuer("platform-ca"), Object{Cluster: fmt.Sprintf("cluster-%04d", i%1000), Kind: KindCertificate, Namespace: "apps", Name: fmt.Sprintf("svc-%05d", i)}, "0b1c6f0e-5a3d-4f7e-9c2a-6d1e2f3a4b5c")
		e.Why, e.RecordedAt, e.RecordedBy = "DoesNotExist", t0.Add(time.Duration(i)*time.Millisecond), "certhub-7d9f8c6b5-x2k4p"
		if ordered {
			e.DER = der
		}
		out[i] = e
	}
	return out
}

// BenchmarkRecord10000 stores 10,000 entries in ConfigMaps of
// DefaultMaxChunkBytes (through a fake API server, in batches as Add
// groups them) and reports the record's size, then lists it as
// `certhub issued` and a starting replica's index do.
func BenchmarkRecord10000(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		name := "CA"
		if ordered {
			name = "ACME(DER kept)"
		}
		b.Run(name, func(b *testing.B) {
			es := benchEntries(b, 10_000, ordered)
			c := fake.NewClientBuilder().Build()
			r, err := New(Options{Client: c, Cache: nopCache{}, Namespace: ns, Writer: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < len(es); i += maxBatch {
				var batch []pending
				for j := i; j < min(i+maxBatch, len(es)); j++ {
					batch = append(batch, pending{e: &es[j]})
				}
				if err := r.commit(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			list := &corev1.ConfigMapList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			total := 0
			for i := range list.Items {
				total += size(&list.Items[i])
			}
			b.ResetTimer()
			for b.Loop() {
				got, _ := Entries(list.Items)
				if len(got) != len(es) {
					b.Fatalf("listed %d entries, want %d", len(got), len(es))
				}
			}
			b.ReportMetric(float64(total)/(1<<20), "MiB/10k-certs")
			b.ReportMetric(float64(len(list.Items)), "ConfigMaps/10k-certs")
		})
	}
}
