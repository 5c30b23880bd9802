package inventory

// Reasons for Events on cluster Secrets in the hub (and log lines).
const (
	// ReasonClusterConnected: the cluster was reached and handed to the manager (the coordinator decides whether this replica writes to it).
	ReasonClusterConnected = "ClusterConnected"
	// ReasonClusterDisengaged: the Secret was deleted; the hub stopped serving the cluster (nothing downstream is deleted).
	ReasonClusterDisengaged = "ClusterDisengaged"
	// ReasonInvalidClusterSecret: the Secret cannot be parsed; the message names the field.
	ReasonInvalidClusterSecret = "InvalidClusterSecret"
	// ReasonDuplicateClusterName: another Secret already registers a cluster of the same name.
	ReasonDuplicateClusterName = "DuplicateClusterName"
	// ReasonClusterUnreachable: the API server could not be reached or refused the credentials.
	ReasonClusterUnreachable = "ClusterUnreachable"
)
