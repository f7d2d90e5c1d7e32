// Package journal is the manager's durable memory of what it owes its
// members, in one bbolt file: for each member, each copy it applied there
// (kind, namespace, name, Propagation, content hash, time), and each
// removal of a Propagation's copies it decided but has not carried out
// (reason, time, kinds).
//
// The hub says what is wanted. It cannot say what is owed: once a
// Propagation, or an object it selected, is gone, nothing on the hub names
// the members that still hold copies. The journal does.
//
// # Contract
//
// A writer records before it acts: a copy before its first apply
// ([Journal.Record]), an owed removal before it releases anything on the
// hub ([Journal.Owe]). Each call returns once its write is on disk;
// concurrent calls share one commit (bbolt's DB.Batch), and a call that
// would change nothing writes nothing. Entries
// go once the member confirms them ([Journal.Forget], [Journal.Settle]) or
// once the caller forgets the member ([Journal.ForgetMember]). When a
// member left the fleet is kept too ([Journal.Depart], cleared by
// [Journal.Return]), so that the caller can forget it only once it has
// been gone long enough, across restarts. An owed removal keeps the time
// it was first decided, which a caller that copies it from elsewhere may
// give.
//
// # Lifecycle
//
// [Open] takes the directory's lock, a file of its own ([LockName]) that is
// never renamed, waiting at most Options.LockTimeout: a second process on
// the same directory gets [ErrLocked], never a hang, and never gets in
// while the journal's file is replaced. The lock is held until
// [Journal.Close].
//
// A file whose content cannot be used (corrupt, truncated, of another
// version or layout, or one that makes bbolt panic) is moved aside and
// replaced by an empty journal; [Journal.Recovered] says why, so the
// caller can tell people and rebuild what it can from the members. Any
// other failure (the directory is held, or cannot be created, read or
// written: permissions, a read-only or full volume) is Open's error and
// leaves the file as it is, with what it owes: it is the caller's to
// report, not a reason to start afresh.
//
// A file well past its live size is compacted at Open and by
// [Journal.Compact], into a new file that replaces the old one by a
// rename; the journal holds a usable file throughout, the old one until
// the rename, the new one after it. The package imports nothing of the
// fleet.
package journal
