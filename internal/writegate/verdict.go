package writegate

// Action is what the hub would do with one Certificate of a cluster it
// does not write in.
type Action string

// The actions of a plan.
const (
	// ActionKeep: the Secret is the hub's and its certificate stays.
	ActionKeep Action = "Keep"
	// ActionAdopt: the Secret cert-manager wrote for this Certificate is taken
	// over with its certificate (it matches the spec and comes from the
	// same issuer identity): no new certificate.
	ActionAdopt Action = "Adopt"
	// ActionReissue: a new certificate replaces the Secret's (through the
	// issuance budget); Reason says why.
	ActionReissue Action = "Reissue"
	// ActionIssue: there is no certificate yet.
	ActionIssue Action = "Issue"
	// ActionRefuse: the hub would not issue (Reason is the Ready=False reason
	// it would write: PolicyDenied, SecretNotOwned, IssuerNotFound, …).
	ActionRefuse Action = "Refuse"
)

// Verdict is the plan's row for one Certificate.
type Verdict struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Action    Action `json:"action"`
	// Adopting is true when the Secret was written by cert-manager (not
	// the hub) and would be taken over.
	Adopting bool   `json:"adopting,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}
