package idem

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrateOpts names where the table lives; nil means the defaults.
type MigrateOpts struct {
	Schema string
	Table  string
}

func (o *MigrateOpts) names() (schema, table string) {
	schema, table = DefaultSchema, DefaultTable
	if o != nil && o.Schema != "" {
		schema = o.Schema
	}
	if o != nil && o.Table != "" {
		table = o.Table
	}
	return schema, table
}

// Migration is one numbered, embedded SQL migration, rendered for a schema and table.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// migrationVars are the placeholders a migration file may use; every value is a sanitised
// identifier, so schema and table names need no quoting by the caller.
type migrationVars struct {
	Table        string // "schema"."table"
	ExpiresIndex string // "table_expires_at_idx" (an index lives in its table's schema)
}

// Migrations returns the migrations rendered for opts, in version order.
func Migrations(opts *MigrateOpts) ([]Migration, error) {
	schema, table := opts.names()
	vars := migrationVars{
		Table:        pgx.Identifier{schema, table}.Sanitize(),
		ExpiresIndex: pgx.Identifier{table + "_expires_at_idx"}.Sanitize(),
	}
	files, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".up.sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("idem: migration %s: name must be NNN_name.up.sql", f)
		}
		up, err := renderMigration(f, vars)
		if err != nil {
			return nil, err
		}
		down, err := renderMigration(strings.TrimSuffix(f, ".up.sql")+".down.sql", vars)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, Up: up, Down: down})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("idem: migrations must be numbered 1, 2, …; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

func renderMigration(file string, vars migrationVars) (string, error) {
	src, err := migrationFS.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("idem: migration %s: %w", file, err)
	}
	t, err := template.New(file).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return "", fmt.Errorf("idem: migration %s: %w", file, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, vars); err != nil {
		return "", fmt.Errorf("idem: migration %s: %w", file, err)
	}
	return b.String(), nil
}

// MigrateResult tells which versions were applied (or, for MigrateDown, reverted) by this call.
type MigrateResult struct{ Applied []int }

// Migrate applies the migrations not yet applied, in a transaction under an advisory lock;
// running it again is a no-op. Applied versions are recorded in <table>_migrations next to the
// key table. The schema is created when it does not exist.
func Migrate(ctx context.Context, db DB, opts *MigrateOpts) (*MigrateResult, error) {
	ms, err := Migrations(opts)
	if err != nil {
		return nil, err
	}
	res := &MigrateResult{}
	err = migrateTx(ctx, db, opts, func(tx pgx.Tx, versions string, applied map[int]bool) error {
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return fmt.Errorf("idem: migration %d (%s) up: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+versions+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("idem: record migration %d: %w", m.Version, err)
			}
			res.Applied = append(res.Applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// MigrateDown reverts every applied migration, newest first, under the same lock as Migrate.
// It drops the key table and everything stored in it.
func MigrateDown(ctx context.Context, db DB, opts *MigrateOpts) (*MigrateResult, error) {
	ms, err := Migrations(opts)
	if err != nil {
		return nil, err
	}
	res := &MigrateResult{}
	err = migrateTx(ctx, db, opts, func(tx pgx.Tx, versions string, applied map[int]bool) error {
		for i := len(ms) - 1; i >= 0; i-- {
			m := ms[i]
			if !applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("idem: migration %d (%s) down: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+versions+" WHERE version = $1", m.Version); err != nil {
				return fmt.Errorf("idem: unrecord migration %d: %w", m.Version, err)
			}
			res.Applied = append(res.Applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// migrateTx runs fn in one transaction that holds an advisory lock named after the table, so
// concurrent Migrate calls (several replicas starting at once) apply each migration once.
func migrateTx(ctx context.Context, db DB, opts *MigrateOpts, fn func(tx pgx.Tx, versions string, applied map[int]bool) error) error {
	schema, table := opts.names()
	versions := pgx.Identifier{schema, table + "_migrations"}.Sanitize()
	tx, err := db.Begin(ctx)
	if err != nil {
		return storeError(ctx, "migrate: begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('idemgen.migrate:' || $1::text))",
		schema+"."+table); err != nil {
		return storeError(ctx, "migrate: advisory lock", err)
	}
	// CREATE SCHEMA IF NOT EXISTS checks the CREATE privilege even when the schema exists, so
	// only ask for it when it is missing.
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return storeError(ctx, "migrate: look up schema", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("idem: migrate: create schema %q: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+versions+` (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("idem: migrate: create %s: %w", versions, err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+versions)
	if err != nil {
		return storeError(ctx, "migrate: read applied versions", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return storeError(ctx, "migrate: read applied versions", err)
	}
	applied := make(map[int]bool, len(vs))
	for _, v := range vs {
		applied[int(v)] = true
	}
	if err := fn(tx, versions, applied); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return storeError(ctx, "migrate: commit", err)
	}
	return nil
}
