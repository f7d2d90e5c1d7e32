package journal

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// FileName is the journal's file in its directory.
const FileName = "journal.db"

// LockName is the file whose lock says which process holds the directory.
// It is never renamed or removed, unlike FileName, which Compact and a
// recovery replace.
const LockName = "journal.lock"

// Version is the layout this package reads and writes.
const Version = "1"

// Default option values.
const (
	DefaultLockTimeout = 5 * time.Second
	DefaultBatchDelay  = 2 * time.Millisecond
)

// keptAside is how many moved-aside files are kept.
const keptAside = 3

// lockPoll is how often Open tries a held lock again.
const lockPoll = 50 * time.Millisecond

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("the journal is held by another process")

var (
	metaBucket   = []byte("meta")
	copiesBucket = []byte("copies")
	owedBucket   = []byte("owed")
	versionKey   = []byte("version")
)

// Options configure a Journal.
type Options struct {
	// LockTimeout bounds the wait for the file's lock. Default:
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// BatchDelay is how long a write waits for others to share its
	// transaction. Default: DefaultBatchDelay.
	BatchDelay time.Duration
	// Now is the clock entries are stamped with. Default: time.Now.
	Now func() time.Time
}

// Recovery tells why the journal found on disk was not used.
type Recovery struct {
	// Err is what was wrong with it.
	Err error
	// MovedTo is where it was moved, or "" when it was missing.
	MovedTo string
}

// Journal is the manager's durable memory of what it owes its members.
// Its methods are safe for concurrent use.
type Journal struct {
	path string
	opts Options
	// lock holds the directory's lock from Open to Close.
	lock *os.File

	// mu is held shared by every use of db and exclusively while
	// Compact replaces it.
	mu sync.RWMutex
	db *bolt.DB

	recovered *Recovery
	commits   atomic.Uint64
	lastTx    atomic.Int64
}

// Open opens the journal in dir, creating dir and the file when missing.
// It first takes the directory's lock (LockName), waiting at most
// Options.LockTimeout, and holds it until Close. A file that is corrupt, or
// of another version or layout, is moved aside and replaced by an empty
// one: see Recovered. Any other failure is returned and leaves the file as
// it is: another process holds the directory (ErrLocked), or the directory
// or the file cannot be created, read or written (permissions, a read-only
// or full volume).
func Open(dir string, opts Options) (*Journal, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.BatchDelay <= 0 {
		opts.BatchDelay = DefaultBatchDelay
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the journal's directory: %w", err)
	}
	lock, err := lockDir(dir, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	j := &Journal{path: filepath.Join(dir, FileName), opts: opts, lock: lock}
	_, statErr := os.Stat(j.path)
	db, err := j.openUsable()
	if bad := (unusable{}); errors.As(err, &bad) {
		movedTo, moveErr := j.moveAside()
		if moveErr != nil {
			_ = j.unlock()
			return nil, fmt.Errorf("the journal %s cannot be used (%w), and moving it aside failed: %w", j.path, bad.error, moveErr)
		}
		j.recovered = &Recovery{Err: bad.error, MovedTo: movedTo}
		db, err = j.openUsable()
	}
	if err != nil {
		_ = j.unlock()
		return nil, err
	}
	if j.recovered == nil && errors.Is(statErr, os.ErrNotExist) {
		j.recovered = &Recovery{Err: errors.New("there was no journal")}
	}
	j.db = db
	if _, err := j.Compact(); err != nil {
		_ = j.Close()
		return nil, err
	}
	return j, nil
}

// lockDir takes dir's lock, polling until timeout.
func lockDir(dir string, timeout time.Duration) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the journal's lock: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		case !time.Now().Before(deadline):
			_ = f.Close()
			return nil, fmt.Errorf("%w: gave up on %s after %s (is another fleet-manager using this --state-dir?)", ErrLocked, path, timeout)
		}
		time.Sleep(min(lockPoll, time.Until(deadline)))
	}
}

// unlock releases the directory's lock.
func (j *Journal) unlock() error {
	if j.lock == nil {
		return nil
	}
	err := j.lock.Close() // closing the last descriptor releases the flock
	j.lock = nil
	return err
}

// unusable is what is wrong with a file's content: corrupt, or of another
// version or layout. Only that moves the file aside.
type unusable struct{ error }

func (u unusable) Unwrap() error { return u.error }

// openUsable opens the file and checks that it is a journal of this
// version and layout, initializing a new one.
func (j *Journal) openUsable() (*bolt.DB, error) {
	db, err := j.openBolt(j.path)
	if err != nil {
		return nil, err
	}
	if err := check(db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// openBolt opens path with bbolt. bbolt's own lock on the file is free
// while the directory's is held, unless an older fleet-manager, which
// knew no directory lock, holds it. A file bbolt cannot read as one of its
// own, or that makes it panic, is unusable.
func (j *Journal) openBolt(path string) (db *bolt.DB, err error) {
	defer func() {
		// bbolt leaves the file it panicked on open: once, and that
		// file is then moved aside.
		if r := recover(); r != nil {
			db, err = nil, unusable{fmt.Errorf("the file is corrupt: %v", r)}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: j.opts.LockTimeout, FreelistType: bolt.FreelistMapType, OpenFile: openFile})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: gave up on %s after %s (is another fleet-manager using this --state-dir?)", ErrLocked, path, j.opts.LockTimeout)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, bolterrors.ErrChecksum):
		return nil, unusable{fmt.Errorf("the file is not a readable bbolt file: %w", err)}
	case err != nil:
		return nil, fmt.Errorf("the journal cannot be opened, and is left as it is: %w", err)
	}
	db.MaxBatchDelay = j.opts.BatchDelay
	return db, nil
}

// openFile opens bbolt's files; tests make it fail as a volume can.
var openFile = os.OpenFile

// check verifies a file's pages, version and layout, and initializes an
// empty one. A corrupt page may make bbolt panic: that is an error here.
func check(db *bolt.DB) error {
	empty, err := inspect(db)
	if err != nil || !empty {
		return err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucket(copiesBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(owedBucket); err != nil {
			return err
		}
		return meta.Put(versionKey, []byte(Version))
	}); err != nil {
		return fmt.Errorf("initializing the journal %s: %w", db.Path(), err)
	}
	return nil
}

// inspect reports whether a file is empty, and an unusable error when its
// pages, version or layout are wrong.
func inspect(db *bolt.DB) (empty bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = unusable{fmt.Errorf("the file is corrupt: %v", r)}
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		var corrupt error
		for err := range tx.Check() { // drained: the check runs until it closes
			corrupt = cmp.Or(corrupt, err)
		}
		if corrupt != nil {
			return unusable{fmt.Errorf("the file is corrupt: %w", corrupt)}
		}
		first, _ := tx.Cursor().First()
		empty = first == nil
		if empty {
			return nil
		}
		if err := checkLayout(tx); err != nil {
			return unusable{err}
		}
		return nil
	})
	return empty, err
}

// checkLayout checks the version and that every entry decodes.
func checkLayout(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		return errors.New("the file is not a journal: it has no meta bucket")
	}
	if v := string(meta.Get(versionKey)); v != Version {
		return fmt.Errorf("the journal is of version %q, not %q", v, Version)
	}
	prefix := []byte(departedPrefix)
	c := meta.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if _, err := decodeDeparted(k, v); err != nil {
			return err
		}
	}
	if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if !slices.ContainsFunc([][]byte{metaBucket, copiesBucket, owedBucket}, func(b []byte) bool { return string(b) == string(name) }) {
			return fmt.Errorf("the journal has an unknown bucket %q", name)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, top := range []struct {
		name   []byte
		decode func(k, v []byte) error
	}{
		{copiesBucket, func(k, v []byte) error { _, err := decodeCopy(k, v); return err }},
		{owedBucket, func(k, v []byte) error { _, err := decodeOwed(k, v); return err }},
	} {
		b := tx.Bucket(top.name)
		if b == nil {
			return fmt.Errorf("the journal has no %s bucket", top.name)
		}
		if err := b.ForEach(func(member, v []byte) error {
			mb := b.Bucket(member)
			if v != nil || mb == nil {
				return fmt.Errorf("the %s bucket holds a value %q where a member's bucket belongs", top.name, member)
			}
			return mb.ForEach(func(k, v []byte) error {
				if err := top.decode(k, v); err != nil {
					return fmt.Errorf("member %s: %w", member, err)
				}
				return nil
			})
		}); err != nil {
			return err
		}
	}
	return nil
}

// moveAside renames the file to one named after now, and removes the
// oldest moved-aside files past keptAside. A missing file moves nowhere.
func (j *Journal) moveAside() (string, error) {
	to := j.path + ".broken-" + j.opts.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(j.path, to); errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	old, err := filepath.Glob(j.path + ".broken-*")
	if err != nil {
		return to, nil
	}
	slices.Sort(old)
	for len(old) > keptAside {
		_ = os.Remove(old[0])
		old = old[1:]
	}
	return to, nil
}

// Recovered says why the file found at Open was not used, or nil when it
// was. A journal that is new or was replaced knows nothing the members
// cannot tell again.
func (j *Journal) Recovered() *Recovery { return j.recovered }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Close closes the file and releases the directory's lock.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db == nil {
		return nil
	}
	err := j.db.Close()
	j.db = nil
	return errors.Join(err, j.unlock())
}

// Stats are the journal's size and work.
type Stats struct {
	Members, Copies, Owed int
	// FileBytes is the file's size; LiveBytes, what its entries use.
	FileBytes, LiveBytes int64
	// Commits counts the write transactions since Open, each one fsync
	// of the data and one of the meta page.
	Commits uint64
}

// Stats returns the journal's size and work.
func (j *Journal) Stats() (Stats, error) {
	st := Stats{Commits: j.commits.Load()}
	err := j.view(func(tx *bolt.Tx) error {
		st.FileBytes = tx.Size()
		members := map[string]bool{}
		for _, top := range [][]byte{copiesBucket, owedBucket} {
			b := tx.Bucket(top)
			bs := b.Stats()
			st.LiveBytes += int64(bs.BranchInuse + bs.LeafInuse + bs.InlineBucketInuse)
			if err := b.ForEachBucket(func(member []byte) error {
				members[string(member)] = true
				n := b.Bucket(member).Stats().KeyN
				if string(top) == string(copiesBucket) {
					st.Copies += n
				} else {
					st.Owed += n
				}
				return nil
			}); err != nil {
				return err
			}
		}
		st.Members = len(members)
		return nil
	})
	return st, err
}

// Compact rewrites the file when it is well past its live size, and
// reports whether it did. Writes wait meanwhile. The journal keeps a
// usable file whatever happens: the old one until the new one has
// replaced it, then the new one, already open.
func (j *Journal) Compact() (bool, error) {
	st, err := j.Stats()
	if err != nil {
		return false, err
	}
	if st.FileBytes < compactFloor || st.FileBytes < 4*st.LiveBytes {
		return false, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db == nil {
		return false, errClosed
	}
	tmp := j.path + ".compact"
	_ = os.Remove(tmp)
	dst, err := j.openBolt(tmp)
	if err == nil {
		err = bolt.Compact(dst, j.db, 4<<20)
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		if dst != nil {
			_ = dst.Close()
		}
		_ = os.Remove(tmp)
		return false, fmt.Errorf("compacting the journal: %w", err)
	}
	// The old file is gone from the directory: it must take no more writes.
	old := j.db
	j.db = dst
	_ = old.Close()
	if err := syncDir(filepath.Dir(j.path)); err != nil {
		return true, fmt.Errorf("compacting the journal: %w", err)
	}
	return true, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// compactFloor is the least file size worth compacting.
const compactFloor = 1 << 20

var errClosed = errors.New("the journal is closed")

func (j *Journal) view(fn func(*bolt.Tx) error) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return errClosed
	}
	return j.db.View(fn)
}

// batch runs fn in a write transaction shared with concurrent callers,
// and returns once it is on disk. fn may run more than once.
func (j *Journal) batch(fn func(*bolt.Tx) error) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return errClosed
	}
	return j.db.Batch(func(tx *bolt.Tx) error {
		if id := int64(tx.ID()); j.lastTx.Swap(id) != id {
			j.commits.Add(1)
		}
		return fn(tx)
	})
}

// memberBucket returns member's bucket under top, creating it when
// create is set; nil when it is missing.
func memberBucket(tx *bolt.Tx, top []byte, member string, create bool) (*bolt.Bucket, error) {
	b := tx.Bucket(top)
	if !create {
		return b.Bucket([]byte(member)), nil
	}
	return b.CreateBucketIfNotExists([]byte(member))
}

// validMember refuses a name that cannot key a bucket.
func validMember(member string) error {
	if member == "" || strings.ContainsRune(member, 0) {
		return fmt.Errorf("invalid member name %q", member)
	}
	return nil
}
