package engage

import (
	"k8s.io/apimachinery/pkg/types"
)

// Request asks a fleet reconciler to reconcile one object in one cluster.
// ClusterName is empty for the hub.
type Request struct {
	ClusterName string
	types.NamespacedName
}

// String returns "cluster/namespace/name", with "hub" for the hub's name.
func (r Request) String() string {
	name := r.ClusterName
	if name == "" {
		name = "hub"
	}
	return name + "/" + r.NamespacedName.String()
}
