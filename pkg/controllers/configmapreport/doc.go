// Package configmapreport is a small fleet-wide controller: it reports
// every ConfigMap it sees, with its cluster.
//
// It is the demo's controller and a model for new ones. It reads each
// object from the cluster the request came from, through
// mgr.GetCluster(ctx, req.ClusterName), and logs it with the keys
// cluster, namespace and name.
//
// # Usage
//
//	r := &configmapreport.Reconciler{Fleet: mgr}
//	inDemo := predicate.NewPredicateFuncs(func(o client.Object) bool {
//		return o.GetNamespace() == "demo"
//	})
//	if err := r.SetupWithManager(mgr, inDemo); err != nil {
//		return err
//	}
package configmapreport
