// Package hubreport writes the report ConfigMaps certhub keeps in the hub
// namespace (discovery, migration, DR pairs): one object per subject,
// marked by a label, its data replaced whole by the one replica that owns
// the subject.
//
// Contract: Put never merges data — what the caller passes is the whole
// report — and never removes labels others set on the object.
package hubreport
