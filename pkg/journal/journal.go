package journal

import (
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
)

// FileName is the journal's file in its directory.
const FileName = "journal.db"

// Version is the layout this package reads and writes.
const Version = "1"

// Default option values.
const (
	DefaultLockTimeout = 5 * time.Second
	DefaultBatchDelay  = 2 * time.Millisecond
)

// keptAside is how many moved-aside files are kept.
const keptAside = 3

// ErrLocked is returned by Open when another process holds the file.
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

	// mu is held shared by every use of db and exclusively while
	// Compact replaces it.
	mu sync.RWMutex
	db *bolt.DB

	recovered *Recovery
	commits   atomic.Uint64
	lastTx    atomic.Int64
}

// Open opens the journal in dir, creating dir and the file when missing.
// A file that cannot be used is moved aside and replaced by an empty one:
// see Recovered. Open fails only when the directory cannot hold a journal
// or another process holds it (ErrLocked).
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
	j := &Journal{path: filepath.Join(dir, FileName), opts: opts}
	_, statErr := os.Stat(j.path)
	db, err := j.openUsable()
	if err != nil && !errors.Is(err, ErrLocked) && !errors.Is(err, errCreating) {
		movedTo, moveErr := j.moveAside()
		if moveErr != nil {
			return nil, fmt.Errorf("the journal %s cannot be used (%w), and moving it aside failed: %w", j.path, err, moveErr)
		}
		j.recovered = &Recovery{Err: err, MovedTo: movedTo}
		db, err = j.openUsable()
	}
	if err != nil {
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

// errCreating marks a failure to create a new file: moving nothing aside
// would not help.
var errCreating = errors.New("creating the journal")

// openUsable opens the file and checks that it is a journal of this
// version and layout, initializing a new one.
func (j *Journal) openUsable() (*bolt.DB, error) {
	_, statErr := os.Stat(j.path)
	db, err := bolt.Open(j.path, 0o600, &bolt.Options{Timeout: j.opts.LockTimeout, FreelistType: bolt.FreelistMapType})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: gave up on %s after %s (is another fleet-manager using this --state-dir?)", ErrLocked, j.path, j.opts.LockTimeout)
	case err != nil && errors.Is(statErr, os.ErrNotExist):
		return nil, fmt.Errorf("%w %s: %w", errCreating, j.path, err)
	case err != nil:
		return nil, fmt.Errorf("opening %s: %w", j.path, err)
	}
	db.MaxBatchDelay = j.opts.BatchDelay
	if err := check(db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// check verifies a file's pages, version and layout, and initializes an
// empty one. A corrupt page may make bbolt panic: that is an error here.
func check(db *bolt.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the file is corrupt: %v", r)
		}
	}()
	empty := false
	if err := db.View(func(tx *bolt.Tx) error {
		var corrupt error
		for err := range tx.Check() { // drained: the check runs until it closes
			corrupt = cmp.Or(corrupt, err)
		}
		if corrupt != nil {
			return fmt.Errorf("the file is corrupt: %w", corrupt)
		}
		first, _ := tx.Cursor().First()
		empty = first == nil
		if empty {
			return nil
		}
		return checkLayout(tx)
	}); err != nil || !empty {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
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
	})
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

// Close closes the file and releases its lock.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db == nil {
		return nil
	}
	err := j.db.Close()
	j.db = nil
	return err
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
// reports whether it did. Writes wait meanwhile.
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
	tmp := j.path + ".compact"
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: j.opts.LockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return false, fmt.Errorf("compacting the journal: %w", err)
	}
	if err := bolt.Compact(dst, j.db, 4<<20); err != nil {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return false, fmt.Errorf("compacting the journal: %w", err)
	}
	if err := dst.Close(); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("compacting the journal: %w", err)
	}
	// The old file's lock is held until the new one replaces it.
	if err := os.Rename(tmp, j.path); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("compacting the journal: %w", err)
	}
	_ = j.db.Close()
	j.db, err = bolt.Open(j.path, 0o600, &bolt.Options{Timeout: j.opts.LockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return false, fmt.Errorf("reopening the compacted journal: %w", err)
	}
	j.db.MaxBatchDelay = j.opts.BatchDelay
	return true, nil
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
