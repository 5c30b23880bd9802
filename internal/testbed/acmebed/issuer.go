package acmebed

import (
	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TSIGSecretKey is the key of the TSIG Secret ClusterIssuer refers to.
const TSIGSecretKey = "secret"

// TSIGSecretObject is the hub Secret holding BIND's TSIG secret, for
// ClusterIssuer's solver.
func (b *Bed) TSIGSecretObject(namespace, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{TSIGSecretKey: []byte(b.TSIGSecret)}}
}

// ClusterIssuer is an ACME ClusterIssuer ordering from this Pebble, its
// account key in the hub Secret accountSecret, solving DNS-01 on this
// BIND over RFC 2136 with the TSIG secret in the hub Secret tsigSecret.
func (b *Bed) ClusterIssuer(name, accountSecret, tsigSecret string) *cmapi.ClusterIssuer {
	return &cmapi.ClusterIssuer{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{ACME: &cmacme.ACMEIssuer{
			Server:     b.DirectoryURL,
			Email:      "platform@" + b.Zone,
			CABundle:   b.ServerCAs,
			PrivateKey: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: accountSecret}},
			Solvers: []cmacme.ACMEChallengeSolver{{DNS01: &cmacme.ACMEChallengeSolverDNS01{RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{
				Nameserver: b.Nameserver, TSIGKeyName: b.TSIGKeyName, TSIGAlgorithm: b.TSIGAlgorithm, Protocol: cmacme.RFC2136UpdateProtocolTCP,
				TSIGSecret: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: tsigSecret}, Key: TSIGSecretKey},
			}}}},
		}}},
	}
}
