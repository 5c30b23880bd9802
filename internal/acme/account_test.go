package acme

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const ns = "certhub"

func issuer(keySecret, field string, disableGeneration bool) *cmapi.ClusterIssuer {
	return &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "le"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{ACME: &cmacme.ACMEIssuer{
		Server: "https://acme.example/dir", DisableAccountKeyGeneration: disableGeneration,
		PrivateKey: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: keySecret}, Key: field},
	}}}}
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

// The account key: read, created when absent, refused with a reason naming
// the problem.
func TestAccountKey(t *testing.T) {
	rsaKey, err := pki.GenerateRSAPrivateKey(2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPEM, err := pki.EncodePrivateKey(ecKey, cmapi.PKCS1)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ci         *cmapi.ClusterIssuer
		objs       []client.Object
		wantReason string
		wantSame   bool // the existing key is used
		created    bool // a key Secret now exists
	}{
		"existing RSA key":                   {ci: issuer("k", "", false), objs: []client.Object{secret("k", map[string][]byte{"tls.key": pki.EncodePKCS1PrivateKey(rsaKey)})}, wantSame: true, created: true},
		"existing key in a custom field":     {ci: issuer("k", "key.pem", false), objs: []client.Object{secret("k", map[string][]byte{"key.pem": pki.EncodePKCS1PrivateKey(rsaKey)})}, wantSame: true, created: true},
		"absent: created":                    {ci: issuer("k", "", false), created: true},
		"absent, generation disabled":        {ci: issuer("k", "", true), wantReason: ReasonInvalidConfig},
		"no secret name":                     {ci: issuer("", "", false), wantReason: ReasonInvalidConfig},
		"field missing":                      {ci: issuer("k", "", false), objs: []client.Object{secret("k", map[string][]byte{"other": []byte("x")})}, wantReason: ReasonInvalidConfig, created: true},
		"not a key":                          {ci: issuer("k", "", false), objs: []client.Object{secret("k", map[string][]byte{"tls.key": []byte("garbage")})}, wantReason: ReasonInvalidConfig, created: true},
		"ECDSA key (cert-manager wants RSA)": {ci: issuer("k", "", false), objs: []client.Object{secret("k", map[string][]byte{"tls.key": ecPEM})}, wantReason: ReasonInvalidConfig, created: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			cl := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).Build()
			r := &accounts{cl: cl, live: cl, opts: Options{Namespace: ns}}
			k, reason, err := r.accountKey(context.Background(), tc.ci)
			if tc.wantReason != "" {
				if err == nil || reason != tc.wantReason {
					t.Fatalf("reason %q, err %v; want %s", reason, err, tc.wantReason)
				}
			} else if err != nil {
				t.Fatalf("unexpected error (%s): %v", reason, err)
			}
			if tc.wantSame && !k.Equal(rsaKey) {
				t.Error("the existing key was not used")
			}
			got := &corev1.Secret{}
			exists := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "k"}, got) == nil
			if exists != tc.created {
				t.Errorf("key Secret exists = %v, want %v", exists, tc.created)
			}
			if tc.wantReason == "" && !tc.wantSame {
				again, _, err := r.accountKey(context.Background(), tc.ci)
				if err != nil || !again.Equal(k) {
					t.Errorf("a second read gave another key (err %v)", err)
				}
			}
		})
	}
}

// Ready changes are reported once; the transition time stays while the
// status and reason do.
func TestSetReady(t *testing.T) {
	ci := issuer("k", "", false)
	if !setReady(ci, cmmeta.ConditionFalse, ReasonRegisterFailed, "boom") {
		t.Error("first condition not reported as a change")
	}
	first := *ci.Status.Conditions[0].LastTransitionTime
	if setReady(ci, cmmeta.ConditionFalse, ReasonRegisterFailed, "boom again") {
		t.Error("same status and reason reported as a change")
	}
	if !ci.Status.Conditions[0].LastTransitionTime.Equal(&first) || ci.Status.Conditions[0].Message != "boom again" {
		t.Errorf("condition %+v: want the first transition time and the new message", ci.Status.Conditions[0])
	}
	if !setReady(ci, cmmeta.ConditionTrue, ReasonAccountRegistered, "ok") || !ready(ci) || len(ci.Status.Conditions) != 1 {
		t.Errorf("conditions %+v: want one, Ready", ci.Status.Conditions)
	}
}
