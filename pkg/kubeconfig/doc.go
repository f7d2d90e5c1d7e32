// Package kubeconfig is the policy that every member kubeconfig meets. It
// is pure and security-critical: it parses bytes and checks them, and never
// reads a file, runs a command or opens a connection.
//
// A kubeconfig from a Secret is untrusted input. [Policy.Parse] checks the
// raw parsed config (clientcmd.Load) before any client exists, because
// building a client already reads the files a kubeconfig names. File
// references and auth-provider plugins are never allowed; exec plugins,
// insecure TLS, proxies, plain HTTP to loopback and link-local or metadata
// addresses each need a field of [Policy]. A refusal is a [RefusedError]
// whose Reason suits a status condition and whose Message never holds
// credential material.
//
// [Policy.DialControl] checks each address a member's dialer connects to,
// after name resolution, so that a host name cannot lead where a literal
// address may not.
//
// [DescribeCredential] says what an accepted kubeconfig authenticates
// with, without holding it: the credential's type, its lifetime (a
// token's iat and exp claims, read unverified; a client certificate's
// validity) and a service account token's service account.
package kubeconfig
