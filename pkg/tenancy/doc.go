// Package tenancy decides, from the hub's TenancyPolicies, which members
// each hub namespace's Propagations may reach and which kinds they may
// carry there. It is pure: a Reach is built from one read of the
// policies and answers questions about namespaces and members as they are
// given to it; it holds no client and starts nothing.
//
// Lifecycle: whoever enforces tenancy (the Propagation controller, the
// dry run of fleet-manager tenancy) reads the policies, builds a Reach
// with New, and asks it For a namespace. A new read makes a new Reach; a
// Reach is read-only and safe to share.
//
// The guarantee it owns: a doubt never widens. A policy that does not
// parse puts every namespace it may speak for in doubt (Doubt is
// non-nil), and a caller in doubt holds: it neither adds nor removes.
// Policies add up: a namespace reaches a member when one policy for it
// names the member, and carries a kind there when one of those allows it.
package tenancy
