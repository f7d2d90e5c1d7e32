// Package registry turns registration Secrets into member registrations.
//
// # Formats
//
// A [Format] says which hub Secrets register clusters and how to read one:
// the native format ([NativeFormat]), and those of multicluster-runtime,
// Cluster API and Argo CD, read so that a fleet registered elsewhere needs
// no re-registration.
package registry
