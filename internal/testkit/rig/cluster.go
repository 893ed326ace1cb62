package rig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
)

// startCluster runs the production-shaped Temporal in the hub on
// Temporal's address (the hub is a namespace of its own, so the fixed
// ports meet nothing), and S3 as startServers does.
func (r *Rig) startCluster(ctx context.Context, vbin string, s3cfg store.Config, inHub func([]string) []string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	log, err := os.Create(filepath.Join(r.Dir, "cluster-up.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	c, err := cluster.Up(ctx, cluster.Options{Dir: filepath.Join(r.Dir, "cluster"), IP: r.temporalIP.String(), Ports: cluster.DefaultPorts(),
		Namespace: "default", DynamicConfig: filepath.Join(r.root, cluster.DynamicConfigFile), Wrap: inHub, Log: log})
	if err != nil {
		return fmt.Errorf("rig %s: production-shaped Temporal in the hub: %w", r.ID, err)
	}
	r.Cluster = c
	r.Endpoints.Temporal, r.Endpoints.Namespace, r.Endpoints.TLS = c.Endpoints().Temporal, c.Endpoints().Namespace, c.Endpoints().TLS

	s3dir := filepath.Join(r.Dir, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	slog := filepath.Join(r.Dir, "s3.log")
	r.serverSpecs = map[string]serverSpec{"versitygw": {args: inHub(devstack.VersitygwArgsOn(vbin, r.s3IP.String(), s3dir, s3Port)),
		env: devstack.VersitygwEnv(s3cfg.AccessKey, s3cfg.SecretKey), log: slog}}
	sp, err := proc.Start("versitygw", r.serverSpecs["versitygw"].args, r.serverSpecs["versitygw"].env, slog, false)
	if err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	r.servers = append(r.servers, sp)
	if err := proc.WaitReady(ctx, sp, time.Minute, proc.HTTPCheck(s3cfg.Endpoint), slog); err != nil {
		return fmt.Errorf("rig %s: S3 in the hub: %w", r.ID, err)
	}
	if r.Store, err = store.New(ctx, s3cfg); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	if err := r.Store.EnsureBucket(ctx); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	return r.dial(ctx)
}

// RestartService is a kill -9 of one of the cluster's processes (a
// Temporal service, or "postgres"), started again after down; it returns
// once the frontend answers again, 2 minutes at most.
func (r *Rig) RestartService(ctx context.Context, name string, down time.Duration) error {
	if r.Cluster == nil {
		return fmt.Errorf("rig %s runs the dev server: no service %s of its own (rig.Config.Cluster)", r.ID, name)
	}
	if err := r.Cluster.Kill(name); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return fmt.Errorf("rig %s: restart %s: %w", r.ID, name, ctx.Err())
	}
	if err := r.Cluster.Start(ctx, name); err != nil {
		return fmt.Errorf("rig %s: restart %s: %w", r.ID, name, err)
	}
	return r.waitTemporal(ctx)
}

// waitTemporal waits until the frontend answers a call, 2 minutes at most.
func (r *Rig) waitTemporal(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if err = r.temporalUp(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("rig %s: Temporal did not answer again: %w", r.ID, err)
}
