package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Ceiling is what the bed itself allows: the downstream writes certhub
// makes per certificate (the Secret apply, the status update, the Event),
// with the key generation and signing before them, made by a minimal client
// with no hub logic, against the same API servers in the same run.
type Ceiling struct {
	Certs   int `json:"certificates"`
	Workers int `json:"workers"`
	// PerSec is certificates per second from the first write to the last.
	PerSec        float64            `json:"certsPerSecond"`
	WritesPerCert float64            `json:"downstreamWritesPerCertificate"`
	WritesBy      map[string]float64 `json:"downstreamWritesPerCertificateBy"`
	// CPUPerCert is the CPU seconds per certificate by kind of process.
	CPUPerCert map[string]float64 `json:"cpuSecondsPerCertificate"`
}

// ceilingWorkers are the concurrencies the ceiling is measured at: the
// replicas' own (3 replicas × certsync's 4 workers) and more, in case the
// bed takes more at once; the best is the ceiling.
var ceilingWorkers = []int{12, 32}

// ceiling re-issues every Certificate in ns of every downstream cluster the
// minimal way, once per entry of ceilingWorkers, and returns each run. No
// replica may run meanwhile (they would take the Secrets back).
func ceiling(ctx context.Context, bed *testbed.Bed, ns string) ([]Ceiling, error) {
	caKey, ca, caPEM, err := newCA("ceiling CA")
	if err != nil {
		return nil, err
	}
	var out []Ceiling
	for _, workers := range ceilingWorkers {
		type job struct {
			cl  client.Client
			crt cmapi.Certificate
		}
		var jobs []job
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return out, err
			}
			for _, c := range list.Items {
				jobs = append(jobs, job{cp.Client, c})
			}
		}
		before, err := requestsOf(ctx, bed)
		if err != nil {
			return out, err
		}
		benchutil.Logf("ceiling: re-issuing %d Certificates with %d workers, no hub", len(jobs), workers)
		cpuBefore, err := benchutil.CPUSeconds()
		if err != nil {
			return out, err
		}
		queue := make(chan job)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		profiled := profileServer(ctx, bed, fmt.Sprintf("ceiling-%d", workers))
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for j := range queue {
					if errs[w] == nil {
						errs[w] = reissueMinimal(ctx, j.cl, &j.crt, ca, caKey, caPEM)
					}
				}
			})
		}
		for _, j := range jobs {
			queue <- j
		}
		close(queue)
		wg.Wait()
		wall := time.Since(start)
		profiled()
		cpuAfter, err := benchutil.CPUSeconds()
		if err != nil {
			return out, err
		}
		for _, err := range errs {
			if err != nil {
				return out, err
			}
		}
		after, err := requestsOf(ctx, bed)
		if err != nil {
			return out, err
		}
		c := Ceiling{Certs: len(jobs), Workers: workers, PerSec: float64(len(jobs)) / wall.Seconds(),
			CPUPerCert: benchutil.CPUDelta(cpuBefore, cpuAfter, len(jobs), cpuKinds...)}
		c.WritesPerCert, c.WritesBy = benchutil.WritesPerCert(benchutil.Delta(before, after), len(jobs))
		benchutil.Logf("ceiling: %d in %.1fs with %d workers: %.1f certs/s, %.2f writes each", len(jobs), wall.Seconds(), workers, c.PerSec, c.WritesPerCert)
		out = append(out, c)
	}
	return out, nil
}

// newCA is a self-signed ECDSA CA named cn: its key, certificate and PEM.
func newCA(cn string) (crypto.Signer, *x509.Certificate, []byte, error) {
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl, err := pki.CertificateTemplateFromCertificate(&cmapi.Certificate{Spec: cmapi.CertificateSpec{CommonName: cn, IsCA: true}})
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, certPEM, nil
}

// reissueMinimal is one certificate the way certhub writes it, without
// anything else: a new key, signed by ca, applied to the Secret, the
// Certificate's status updated, an Event recorded.
func reissueMinimal(ctx context.Context, cl client.Client, crt *cmapi.Certificate, ca *x509.Certificate, caKey crypto.Signer, caPEM []byte) error {
	key, err := pki.GeneratePrivateKeyForCertificate(crt)
	if err != nil {
		return err
	}
	tmpl, err := pki.CertificateTemplateFromCertificate(crt)
	if err != nil {
		return err
	}
	certPEM, cert, err := pki.SignCertificate(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodePrivateKey(key, cmapi.PKCS1)
	if err != nil {
		return err
	}
	secret := corev1ac.Secret(crt.Spec.SecretName, crt.Namespace).
		WithType(corev1.SecretTypeTLS).
		WithAnnotations(map[string]string{
			cmapi.CertificateNameKey: crt.Name, cmapi.IssuerNameAnnotationKey: crt.Spec.IssuerRef.Name,
			cmapi.IssuerKindAnnotationKey: crt.Spec.IssuerRef.Kind, cmapi.IssuerGroupAnnotationKey: crt.Spec.IssuerRef.Group,
			cmapi.CommonNameAnnotationKey: cert.Subject.CommonName,
		}).
		WithData(map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, cmmeta.TLSCAKey: caPEM})
	if err := cl.Apply(ctx, secret, client.FieldOwner("certhub-ceiling"), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply Secret %s/%s: %w", crt.Namespace, crt.Spec.SecretName, err)
	}
	now := metav1.Now()
	rev := 1
	if crt.Status.Revision != nil {
		rev = *crt.Status.Revision + 1
	}
	crt.Status.Revision = &rev
	crt.Status.NotBefore, crt.Status.NotAfter = &metav1.Time{Time: cert.NotBefore}, &metav1.Time{Time: cert.NotAfter}
	crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue,
		Reason: "Ready", Message: "Certificate is up to date and has not expired", LastTransitionTime: &now, ObservedGeneration: crt.Generation}}
	if err := cl.Status().Update(ctx, crt); err != nil {
		return fmt.Errorf("failed to update status of Certificate %s/%s: %w", crt.Namespace, crt.Name, err)
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: crt.Name + ".", Namespace: crt.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: cmapi.CertificateKind, APIVersion: cmapi.SchemeGroupVersion.String(), Namespace: crt.Namespace, Name: crt.Name, UID: crt.UID},
		Type:           corev1.EventTypeNormal, Reason: "Issuing", Message: "The certificate has been successfully issued",
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "certhub-ceiling"},
	}
	if err := cl.Create(ctx, ev); err != nil {
		return fmt.Errorf("failed to record an Event for %s/%s: %w", crt.Namespace, crt.Name, err)
	}
	return nil
}
