// Package engage is the engagement protocol: how clusters reach the
// components that work on them, and how their events reach a fleet
// controller's queue.
//
// # Vocabulary
//
// An [Aware] is a component that works on clusters, such as a fleet
// controller. Engage(ctx, clusterName, cl) hands it one cluster; ctx lives
// exactly as long as the aware works on that cluster: until the cluster
// leaves the fleet, or a Selector stops accepting it ("" names the hub).
//
// A [Request] is a controller-runtime request tagged with the name of the
// cluster it came from.
//
// # The engager
//
// The [Engager] hands every cluster to every aware that accepts it. The
// member pool calls [Engager.Engage] once per connection of a member, for
// that connection's life; awares registered with [Engager.Add] after members joined are
// handed those members too, and [Engager.Remove] ends every engagement of
// one and returns once they have ended. A [Selector] accepts only some clusters; it is
// asked again at every [Engager.Recheck], so an aware that starts
// accepting a cluster is engaged with it, and one that stops is
// disengaged, before the pair can be engaged again. Each (cluster, aware)
// pair is engaged in its own goroutine and retried with capped, jittered
// exponential backoff until it succeeds or ends, so one slow or failing
// aware, or one slow cluster, delays nothing but itself. Engage returns at
// once, and starts no goroutine of its own while the cluster is engaged;
// the channel it returns closes once the cluster's context has ended and
// every engagement goroutine for it has returned. [Engager.Serve] blocks
// until then.
//
// # Sources
//
// A [Kind] is a multi-cluster source. controller-runtime's source.Kind
// never removes its event handler, and a source added to a running
// controller runs under the controller's context rather than the
// cluster's. A Kind instead registers its handler directly on the
// cluster's informer under the engagement's context, and removes it with
// RemoveEventHandler when that context ends. It does not wait for the
// informer to sync: it returns a channel that closes when the handler has
// seen the initial list, and the caller bounds that wait.
//
// Handlers are controller-runtime's own. Each cluster gets a view of the
// controller's queue that tags every request with the cluster's name and
// keeps the priority of initial-list events low. Handlers that need the
// cluster, such as owner handlers, which need its REST mapper, are built
// per engagement by a [HandlerFunc].
//
// [Kind.Replay] hands a joining cluster the requests that another
// cluster's objects make for it, such as hub objects mapped to every
// member, so that a member that joins or comes back gets the work that
// exists, not only the events that happen after it joined.
package engage
