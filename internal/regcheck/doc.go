// Package regcheck checks cluster registrations offline, as Argo CD and the
// hub would read them, for `certhub cluster validate` in CI: plain Argo CD
// cluster Secrets, and the forms that become one (SealedSecrets,
// ExternalSecrets with templates, SOPS-encrypted files), parsed with the
// inventory's own parser (inventory.ValidateSecret).
//
//	files ──▶ Checker.File (YAML documents) ──▶ per object: is it a
//	  registration (or one by mistake: nearMiss)? ──▶ inventory.ValidateSecret
//	  ──▶ duplicates across files ──▶ Findings (error | warning | ok),
//	  Connections (what each registration connects to, --show-connection)
//
// Contract:
//   - Nothing is connected to and no credential plugin is run: the checks
//     are of the text only; the in-cluster server is valid anywhere.
//   - Every problem is a Finding naming its file and line; a file that is
//     not YAML is skipped, never an error.
//   - Connection's JSON is mirrored by test/argocd, which compares it with
//     Argo CD's own reading of the same Secrets.
package regcheck
