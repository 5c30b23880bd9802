package inventory

// Reasons for Events on cluster Secrets in the hub (and log lines).
const (
	// ReasonClusterConnected: the cluster was reached and handed to the manager (the coordinator decides whether this replica writes to it).
	ReasonClusterConnected = "ClusterConnected"
	// ReasonClusterDisengaged: the Secret lost the cluster label or left the
	// --cluster-selector (it still exists, so the Event has an object); the
	// hub stopped serving the cluster. A deleted Secret is logged only.
	// Nothing downstream is deleted either way.
	ReasonClusterDisengaged = "ClusterDisengaged"
	// ReasonInvalidClusterSecret: the Secret cannot be parsed; the message names the field.
	ReasonInvalidClusterSecret = "InvalidClusterSecret"
	// ReasonDuplicateClusterName: another Secret (or kubeconfig file) already registers, or is connecting, a cluster of the same name.
	ReasonDuplicateClusterName = "DuplicateClusterName"
	// ReasonClusterUnreachable: the API server could not be reached or refused the credentials.
	ReasonClusterUnreachable = "ClusterUnreachable"
)
