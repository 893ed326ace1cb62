// Package cluster runs a production-shaped Temporal on this machine for
// rehearsals (issue 27; docs/cluster.md): Debian's PostgreSQL for
// persistence and SQL visibility, the databases made and migrated by the
// server's own schema tool, history, matching, frontend and worker as four
// processes of the Temporal server built from its Go module, mTLS on every
// gRPC connection with a CA and certificates made at start, and the
// Temporal UI server in front. The dev server hides what this shows:
// caches that refresh on a timer, SQL visibility, a restart of one
// service or of the database.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
)

// Options say where and how the cluster runs.
type Options struct {
	Dir       string // state: certificates, configuration, logs
	IP        string // the address every service listens on
	Ports     Ports
	Namespace string
	// Retention is the namespace's; 0 is 3 days.
	Retention time.Duration
	// DynamicConfig is the server's dynamic configuration file, the one
	// deploy/compose mounts.
	DynamicConfig string
	// Wrap, when set, turns each command line into the one that runs it
	// (the rig runs the cluster inside its hub's network namespace).
	Wrap func([]string) []string
	// Detach leaves the processes running when the caller exits.
	Detach bool
	// UI starts the Temporal UI server on Ports.UI.
	UI  bool
	Log io.Writer
}

// Cluster is a running production-shaped Temporal.
type Cluster struct {
	o       Options
	certs   Certs
	pgDir   string
	pgBin   string
	pgPass  string
	config  string
	server  string
	procs   map[string]*proc.Server
	started time.Time
}

// MaxMembershipPort is the highest membership port the SQL persistence
// stores: the schema's cluster_membership.rpc_port is a smallint, and a
// service on a higher port exits at start ("value … is out of range for
// type smallint").
const MaxMembershipPort = 32767

// DefaultPorts are fixed ports beside the dev stack's (7233, 8233).
func DefaultPorts() Ports {
	return Ports{
		GRPC:       map[string]int{"frontend": 7433, "history": 7434, "matching": 7435, "worker": 7439},
		Membership: map[string]int{"frontend": 6433, "history": 6434, "matching": 6435, "worker": 6439},
		HTTP:       7443, Postgres: 5433, UI: 8433,
	}
}

// Up brings the cluster up: tools built if missing, certificates,
// PostgreSQL, the schema, the four services, the namespace and the UI.
// What fails is named with the setting to change.
func Up(ctx context.Context, o Options) (*Cluster, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Retention == 0 {
		o.Retention = 72 * time.Hour
	}
	if o.Wrap == nil {
		o.Wrap = func(a []string) []string { return a }
	}
	for _, s := range Services {
		if p := o.Ports.Membership[s]; p > MaxMembershipPort {
			return nil, fmt.Errorf("membership port %d of the %s service is above %d: PostgreSQL keeps it in cluster_membership.rpc_port, a smallint; choose services.%s.rpc.membershipPort at most %d",
				p, s, MaxMembershipPort, s, MaxMembershipPort)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster state folder: %w", err)
	}
	c := &Cluster{o: o, procs: map[string]*proc.Server{}, started: time.Now()}
	var err error
	for _, t := range []*devstack.Tool{&devstack.ServerTool, &devstack.SQLTool} {
		p, err := t.Ensure(ctx, o.Log)
		if err != nil {
			return nil, err
		}
		if t.Name == devstack.ServerTool.Name {
			c.server = p
		}
	}
	if c.certs, err = MakeCerts(filepath.Join(o.Dir, "tls"), []string{o.IP, "127.0.0.1"}); err != nil {
		return nil, err
	}
	if err := c.startPostgres(ctx); err != nil {
		return nil, c.fail(err)
	}
	if err := c.schema(ctx); err != nil {
		return nil, c.fail(err)
	}
	cfg, err := serverConfig{IP: o.IP, Ports: o.Ports, Certs: c.certs, PGPassword: c.pgPass, DynamicConfig: o.DynamicConfig, HistoryShards: 4}.render()
	if err != nil {
		return nil, c.fail(err)
	}
	c.config = filepath.Join(o.Dir, "temporal.yaml")
	if err := os.WriteFile(c.config, cfg, 0o600); err != nil {
		return nil, c.fail(fmt.Errorf("write %s: %w", c.config, err))
	}
	for _, s := range Services {
		if err := c.Start(ctx, s); err != nil {
			return nil, c.fail(err)
		}
	}
	if err := c.registerNamespace(ctx); err != nil {
		return nil, c.fail(err)
	}
	if o.UI {
		if err := c.startUI(ctx); err != nil {
			return nil, c.fail(err)
		}
	}
	return c, nil
}

// fail stops what was started and returns err.
func (c *Cluster) fail(err error) error {
	c.Down()
	return err
}

// Down stops every process; PostgreSQL's data stays.
func (c *Cluster) Down() {
	names := make([]string, 0, len(c.procs))
	for n := range c.procs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n != "postgres" {
			c.procs[n].Stop(10 * time.Second)
		}
	}
	if p := c.procs["postgres"]; p != nil {
		p.Stop(20 * time.Second)
	}
}

// Purge removes PostgreSQL's data (after Down).
func (c *Cluster) Purge() error { return os.RemoveAll(c.pgDir) }

// Endpoints are what workers and the starter connect with: the frontend
// over mTLS with the client certificate.
func (c *Cluster) Endpoints() connect.Endpoints {
	on := true
	return connect.Endpoints{
		Temporal:  net.JoinHostPort(c.o.IP, strconv.Itoa(c.o.Ports.GRPC["frontend"])),
		Namespace: c.o.Namespace,
		TLS:       connect.TLS{Enabled: &on, CertFile: c.certs.Client, KeyFile: c.certs.ClientKey, CAFile: c.certs.CA, ServerName: ServerName},
	}
}

// Proc is a running process of the cluster (a service, "postgres" or
// "ui"), nil if none.
func (c *Cluster) Proc(name string) *proc.Server { return c.procs[name] }

// Certs are the cluster's certificate files.
func (c *Cluster) Certs() Certs { return c.certs }

// Log is a process's log file.
func (c *Cluster) Log(name string) string { return filepath.Join(c.o.Dir, "logs", name+".log") }

// Start starts one service (or "postgres") and waits until it listens.
func (c *Cluster) Start(ctx context.Context, name string) error {
	if name == "postgres" {
		return c.startPostgres(ctx)
	}
	port, ok := c.o.Ports.GRPC[name]
	if !ok {
		return fmt.Errorf("unknown service %q (use %s or postgres)", name, strings.Join(Services, ", "))
	}
	// The log is appended to: what this start wrote begins at its size now.
	var from int64
	if fi, err := os.Stat(c.Log(name)); err == nil {
		from = fi.Size()
	}
	args := c.o.Wrap([]string{c.server, "--config-file", c.config, "--allow-no-auth", "start", "--service", name})
	p, err := proc.Start("temporal-"+name, args, nil, c.Log(name), c.o.Detach)
	if err != nil {
		return err
	}
	c.procs[name] = p
	addr := net.JoinHostPort(c.o.IP, strconv.Itoa(port))
	if err := proc.WaitReady(ctx, p, 2*time.Minute, c.tcpCheck(addr), c.Log(name)); err != nil {
		if f := serverFault(c.Log(name), from); f != "" {
			return fmt.Errorf("temporal %s on %s: %s: %w", name, addr, f, err)
		}
		return fmt.Errorf("temporal %s on %s: %w", name, addr, err)
	}
	return nil
}

// Kill kills one process (a service or "postgres") at once, as kill -9.
func (c *Cluster) Kill(name string) error {
	p := c.procs[name]
	if p == nil {
		return fmt.Errorf("no process %q to kill", name)
	}
	p.Kill()
	delete(c.procs, name)
	return nil
}

// tcpCheck dials addr from where the services run: with a Wrap that is
// another network namespace, so the dial runs through it too.
func (c *Cluster) tcpCheck(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		args := c.o.Wrap([]string{"true"})
		if len(args) == 1 {
			return proc.TCPCheck(addr)(ctx)
		}
		// Inside another namespace: bash's /dev/tcp is the smallest dialer.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		host, port, _ := net.SplitHostPort(addr)
		a := c.o.Wrap([]string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)})
		return exec.CommandContext(cctx, a[0], a[1:]...).Run()
	}
}

// PostgresBin finds Debian's PostgreSQL server programs' folder.
func PostgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(dirs) == 0 {
		return "", errors.New("PostgreSQL's server is not installed (/usr/lib/postgresql/*/bin/postgres): install Debian's package postgresql (apt-get install postgresql), or run `go run ./deploy/cluster prereqs` as root")
	}
	sort.Strings(dirs)
	return filepath.Dir(dirs[len(dirs)-1]), nil
}

// asPostgres runs a PostgreSQL program as the postgres user when this
// process is root (PostgreSQL refuses to run as root).
func asPostgres(args []string) []string {
	if os.Geteuid() != 0 {
		return args
	}
	return append([]string{"runuser", "-u", "postgres", "--"}, args...)
}

// startPostgres makes the database cluster the first time (in a folder
// the postgres user can reach, named after the state folder) and starts
// the server on the cluster's address.
func (c *Cluster) startPostgres(ctx context.Context) error {
	bin, err := PostgresBin()
	if err != nil {
		return err
	}
	c.pgBin = bin
	abs, _ := filepath.Abs(c.o.Dir)
	sum := sha256.Sum256([]byte(abs))
	c.pgDir = filepath.Join(os.TempDir(), "roundhouse-pg-"+hex.EncodeToString(sum[:6]))
	data := filepath.Join(c.pgDir, "data")
	passFile := filepath.Join(c.o.Dir, "pg-password")
	if body, err := os.ReadFile(passFile); err == nil {
		c.pgPass = strings.TrimSpace(string(body))
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil || c.pgPass == "" {
		if err := c.initdb(ctx, passFile); err != nil {
			return err
		}
	}
	args := c.o.Wrap(asPostgres([]string{filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(c.o.Ports.Postgres),
		"-c", "listen_addresses=" + c.o.IP, "-c", "unix_socket_directories=" + filepath.Join(c.pgDir, "run"), "-c", "max_connections=200"}))
	p, err := proc.Start("postgres", args, nil, c.Log("postgres"), c.o.Detach)
	if err != nil {
		return err
	}
	c.procs["postgres"] = p
	addr := net.JoinHostPort(c.o.IP, strconv.Itoa(c.o.Ports.Postgres))
	if err := proc.WaitReady(ctx, p, time.Minute, c.tcpCheck(addr), c.Log("postgres")); err != nil {
		return fmt.Errorf("PostgreSQL on %s: %w", addr, err)
	}
	return nil
}

// initdb makes a fresh database cluster whose superuser is temporal, of a
// new password (kept in the state folder), password logins over TCP: the
// schema tool creates the databases and visibility's btree_gin as it.
func (c *Cluster) initdb(ctx context.Context, passFile string) error {
	os.RemoveAll(c.pgDir)
	for _, d := range []string{c.pgDir, filepath.Join(c.pgDir, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("PostgreSQL's folder: %w", err)
		}
		if err := chownPostgres(d); err != nil {
			return err
		}
	}
	b := make([]byte, 18)
	rand.Read(b)
	pass := hex.EncodeToString(b)
	pwFile := filepath.Join(c.pgDir, "run", "pw")
	if err := os.WriteFile(pwFile, []byte(pass+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwFile)
	if err := chownPostgres(pwFile); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a := asPostgres([]string{filepath.Join(c.pgBin, "initdb"), "-D", filepath.Join(c.pgDir, "data"), "-U", "temporal", "--pwfile", pwFile,
		"--auth-local", "peer", "--auth-host", "scram-sha-256", "-E", "UTF8", "--locale", "C"})
	if out, err := exec.CommandContext(cctx, a[0], a[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("make PostgreSQL's database cluster (initdb): %w: %s", err, proc.LastLine(string(out)))
	}
	// initdb lets password logins in from loopback only; the services
	// connect from the cluster's address, which may be a rig's hub.
	hba := filepath.Join(c.pgDir, "data", "pg_hba.conf")
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("PostgreSQL's pg_hba.conf: %w", err)
	}
	_, err = fmt.Fprintf(f, "host all temporal samenet scram-sha-256\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("PostgreSQL's pg_hba.conf: %w", err)
	}
	c.pgPass = pass
	return os.WriteFile(passFile, []byte(pass+"\n"), 0o600)
}

// chownPostgres gives path to the postgres user when this process is root.
func chownPostgres(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("no postgres user (Debian's postgresql package makes it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("give %s to postgres: %w", path, err)
	}
	return nil
}

// schema creates Temporal's two databases when missing and brings their
// schemas to the server's version with the server's own tool (its schemas
// are built in): what an operator runs before a first start or an upgrade.
func (c *Cluster) schema(ctx context.Context) error {
	tool, err := devstack.SQLTool.Find()
	if err != nil {
		return err
	}
	for _, db := range []struct{ name, schema string }{{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		sql := func(args ...string) (string, error) {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			a := c.o.Wrap(append([]string{tool, "--plugin", "postgres12", "--ep", c.o.IP, "-p", strconv.Itoa(c.o.Ports.Postgres),
				"-u", "temporal", "--db", db.name}, args...))
			cmd := exec.CommandContext(cctx, a[0], a[1:]...)
			cmd.Env = append(os.Environ(), "SQL_PASSWORD="+c.pgPass)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := sql("create")
		switch {
		case err == nil:
			if out, err := sql("setup-schema", "-v", "0.0"); err != nil {
				return fmt.Errorf("set up the schema of database %s: %w: %s", db.name, err, proc.LastLine(out))
			}
		case strings.Contains(out, "already exists"):
		default:
			return fmt.Errorf("create database %s on PostgreSQL %s:%d: %w: %s", db.name, c.o.IP, c.o.Ports.Postgres, err, proc.LastLine(out))
		}
		if out, err := sql("update-schema", "--schema-name", db.schema); err != nil {
			return fmt.Errorf("update the schema of database %s: %w: %s", db.name, err, proc.LastLine(out))
		}
	}
	return nil
}

// registerNamespace creates the namespace unless it exists, once the
// frontend answers.
func (c *Cluster) registerNamespace(ctx context.Context) error {
	opts, err := c.Endpoints().ClientOptions()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		nc, err := client.NewNamespaceClient(opts)
		if err == nil {
			err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: c.o.Namespace,
				WorkflowExecutionRetentionPeriod: durationpb.New(c.o.Retention)})
			nc.Close()
			var exists *serviceerror.NamespaceAlreadyExists
			if err == nil || errors.As(err, &exists) {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("register namespace %s on %s: %w", c.o.Namespace, c.Endpoints().Temporal, last)
}

// startUI runs the Temporal UI server against the frontend, over mTLS
// with the client certificate, checking the frontend's.
func (c *Cluster) startUI(ctx context.Context) error {
	bin, err := devstack.UIServerTool.Ensure(ctx, c.o.Log)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.o.Dir, "ui", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`temporalGrpcAddress: %s
host: %s
port: %d
enableUi: true
defaultNamespace: %s
cors:
  cookieInsecure: true
tls:
  caFile: %s
  certFile: %s
  keyFile: %s
  enableHostVerification: true
  serverName: %s
`, c.Endpoints().Temporal, c.o.IP, c.o.Ports.UI, c.o.Namespace, c.certs.CA, c.certs.Client, c.certs.ClientKey, ServerName)
	if err := os.WriteFile(filepath.Join(dir, "rehearsal.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	args := c.o.Wrap([]string{bin, "--root", filepath.Join(c.o.Dir, "ui"), "--config", "config", "--env", "rehearsal", "start"})
	p, err := proc.Start("temporal-ui", args, nil, c.Log("ui"), c.o.Detach)
	if err != nil {
		return err
	}
	c.procs["ui"] = p
	addr := net.JoinHostPort(c.o.IP, strconv.Itoa(c.o.Ports.UI))
	if err := proc.WaitReady(ctx, p, time.Minute, c.tcpCheck(addr), c.Log("ui")); err != nil {
		return fmt.Errorf("Temporal UI on %s: %w", addr, err)
	}
	return nil
}

// ConfigFile is the server's configuration file every service reads.
func (c *Cluster) ConfigFile() string { return c.config }

// SQL runs statements on one of the cluster's databases (temporal,
// temporal_visibility) as the temporal user, and returns psql's output.
func (c *Cluster) SQL(ctx context.Context, db, statements string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	conn := fmt.Sprintf("host=%s port=%d user=temporal dbname=%s", c.o.IP, c.o.Ports.Postgres, db)
	a := c.o.Wrap([]string{"psql", conn, "-v", "ON_ERROR_STOP=1", "-At", "-c", statements})
	cmd := exec.CommandContext(ctx, a[0], a[1:]...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+c.pgPass)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql on %s: %w: %s", db, err, proc.LastLine(string(out)))
	}
	return string(out), nil
}

// HoldVisibility holds the visibility table's writes for d (a lock that
// lets reads through): the history service's visibility updates wait, so
// runs and their changes are listed late, as when SQL visibility falls
// behind. It returns when the lock is released.
func (c *Cluster) HoldVisibility(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	sql := fmt.Sprintf("BEGIN; LOCK TABLE executions_visibility IN EXCLUSIVE MODE; SELECT pg_sleep(%.0f); COMMIT;", d.Seconds())
	if _, err := c.SQL(ctx, "temporal_visibility", sql); err != nil {
		return fmt.Errorf("hold visibility's writes: %w", err)
	}
	return nil
}
