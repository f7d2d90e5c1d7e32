package controlplane

import (
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Proxy forwards TCP connections on a loopback port of its own to a
// target address. A test takes the target down (connections refused) and
// up again on the same port, or makes it hang (connections accepted, never
// answered), without touching the API server behind it.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	listener net.Listener
	hang     bool
	conns    map[net.Conn]struct{} // every open connection, both sides
	accepted map[net.Conn]struct{} // the open connections clients made
	wg       sync.WaitGroup
}

// ProxyConfig starts a Proxy to cfg's server and returns a copy of cfg
// that reaches the server through it.
func ProxyConfig(cfg *rest.Config) (*rest.Config, *Proxy, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, nil, err
	}
	p, err := StartProxy(u.Host)
	if err != nil {
		return nil, nil, err
	}
	proxied := rest.CopyConfig(cfg)
	proxied.Host = "https://" + p.Addr()
	return proxied, p, nil
}

// StartProxy listens on a free loopback port and forwards to target.
func StartProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}, accepted: map[net.Conn]struct{}{}}
	p.serve(l)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Accepted returns the open connections clients made, so a test can tell
// which connections a client closed and which it opened since.
func (p *Proxy) Accepted() []net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.accepted))
}

// Down closes the listener and every connection: dials are refused.
func (p *Proxy) Down() {
	p.mu.Lock()
	l := p.listener
	p.listener = nil
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	p.wg.Wait()
}

// Up listens on the same port again and forwards as before.
func (p *Proxy) Up() error {
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(l)
	return nil
}

// Hang makes the proxy accept connections and never answer them, or
// forward again.
func (p *Proxy) Hang(hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang = hang
}

// Close takes the proxy down for good.
func (p *Proxy) Close() { p.Down() }

func (p *Proxy) serve(l net.Listener) {
	p.mu.Lock()
	p.listener = l
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				_ = c.Close()
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

// track records c, and reports false once the proxy is down.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener == nil {
		return false
	}
	p.conns[c] = struct{}{}
	p.accepted[c] = struct{}{}
	return true
}

func (p *Proxy) forward(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.accepted, c)
		p.mu.Unlock()
		_ = c.Close()
	}()
	p.mu.Lock()
	hang := p.hang
	p.mu.Unlock()
	if hang {
		_, _ = io.Copy(io.Discard, c) // until the client or Down closes it
		return
	}
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.listener == nil {
		p.mu.Unlock()
		_ = upstream.Close()
		return
	}
	p.conns[upstream] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends when either side closes
		_ = dst.Close()
		done <- struct{}{}
	}
	go pipe(upstream, c)
	go pipe(c, upstream)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, upstream)
	p.mu.Unlock()
}

// ViaProxy returns kubeconfig with the server of its current context moved
// to a new proxy in front of it, and the proxy, which the caller closes.
func ViaProxy(kubeconfig []byte) ([]byte, *Proxy, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	server := raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster]
	u, err := url.Parse(server.Server)
	if err != nil {
		return nil, nil, err
	}
	proxy, err := StartProxy(u.Host)
	if err != nil {
		return nil, nil, err
	}
	server.Server = "https://" + proxy.Addr()
	out, err := clientcmd.Write(*raw)
	if err != nil {
		proxy.Close()
		return nil, nil, err
	}
	return out, proxy, nil
}
