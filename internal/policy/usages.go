package policy

import (
	"crypto/x509"
	"fmt"
	"slices"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
)

// allUsages are cert-manager's key usage names, in the order a denial
// names them.
var allUsages = []cmapi.KeyUsage{
	cmapi.UsageSigning, cmapi.UsageDigitalSignature, cmapi.UsageContentCommitment, cmapi.UsageKeyEncipherment,
	cmapi.UsageKeyAgreement, cmapi.UsageDataEncipherment, cmapi.UsageCertSign, cmapi.UsageCRLSign,
	cmapi.UsageEncipherOnly, cmapi.UsageDecipherOnly, cmapi.UsageAny, cmapi.UsageServerAuth, cmapi.UsageClientAuth,
	cmapi.UsageCodeSigning, cmapi.UsageEmailProtection, cmapi.UsageSMIME, cmapi.UsageIPsecEndSystem,
	cmapi.UsageIPsecTunnel, cmapi.UsageIPsecUser, cmapi.UsageTimestamping, cmapi.UsageOCSPSigning,
	cmapi.UsageMicrosoftSGC, cmapi.UsageNetscapeSGC,
}

// defaultKeyUsage are the key usage bits cert-manager signs when a spec
// lists no usages; a policy never has to list them. A CA's cert sign bit is
// allowed with the CA (allowed.isCA).
const defaultKeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment

// compileUsages turns the policy's usage names into the x509 bits and
// extended usages they allow.
func (p *compiled) compileUsages() {
	p.ku = defaultKeyUsage
	for u := range p.usages {
		if k, ok := apiutil.KeyUsageType(u); ok {
			p.ku |= k
		} else if e, ok := apiutil.ExtKeyUsageType(u); ok {
			p.eku = append(p.eku, e)
		}
	}
}

// checkUsages checks the template's key usage bits and extended key usages.
func (p *compiled) checkUsages(f *facts, x vars, explain bool) string {
	allowed := p.ku
	if p.isCA && f.isCA { // the CA's cert sign bit comes with the CA, never on a leaf
		allowed |= x509.KeyUsageCertSign
	}
	if extra := f.ku &^ allowed; extra != 0 {
		if !explain {
			return denied
		}
		return fmt.Sprintf("spec.usages %q is not allowed (allowed: %s)", usageName(extra), usageList(p.usages))
	}
	for _, e := range f.eku {
		if !slices.Contains(p.eku, e) {
			if !explain {
				return denied
			}
			return fmt.Sprintf("spec.usages %q is not allowed (allowed: %s)", extUsageName(e), usageList(p.usages))
		}
	}
	return p.otherEKU.check("extended key usage", f.unknownEKU, x, explain)
}

// usageName is a cert-manager name of the lowest bit of ku.
func usageName(ku x509.KeyUsage) cmapi.KeyUsage {
	low := ku & -ku
	for _, u := range allUsages {
		if k, ok := apiutil.KeyUsageType(u); ok && k == low {
			return u
		}
	}
	return cmapi.KeyUsage(fmt.Sprintf("key usage bit %d", low))
}

func extUsageName(e x509.ExtKeyUsage) cmapi.KeyUsage {
	for _, u := range allUsages {
		if k, ok := apiutil.ExtKeyUsageType(u); ok && k == e {
			return u
		}
	}
	return cmapi.KeyUsage(fmt.Sprintf("extended key usage %d", e))
}
