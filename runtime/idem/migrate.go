package idem

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrator applies the key table's migrations. Build it from the same Config as the Store
// (NewMigrator(pool, cfg) beside NewStore(pool, cfg)), so the table migrated is the table served.
type Migrator struct {
	db            DB
	schema, table string
}

// NewMigrator returns a Migrator for the key table cfg names; cfg may be nil (the defaults).
func NewMigrator(db DB, cfg *Config) (*Migrator, error) {
	if db == nil {
		return nil, errors.New("idem: NewMigrator: db is nil (pass a *pgxpool.Pool)")
	}
	m := &Migrator{db: db, schema: DefaultSchema, table: DefaultTable}
	if cfg != nil && cfg.Schema != "" {
		m.schema = cfg.Schema
	}
	if cfg != nil && cfg.Table != "" {
		m.table = cfg.Table
	}
	if err := checkTable(m.table); err != nil {
		return nil, err
	}
	return m, nil
}

// Direction is which way Migrate goes.
type Direction int

const (
	DirectionUp   Direction = iota + 1 // apply what is not applied, oldest first
	DirectionDown                      // revert what is applied, newest first (drops the table and what it holds)
)

// MigrateOpts say how to migrate; nil means every step, for real.
type MigrateOpts struct {
	// MaxSteps limits how many migrations are applied or reverted; zero means all.
	MaxSteps int
	// DryRun reports what would run, and runs nothing.
	DryRun bool
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
	Schema       string // "schema": qualifies an index's name where a statement would look it up on the search_path
	ExpiresIndex string // "table_expires_at_idx" (an index lives in its table's schema)
	// StateCheck and AttemptCheck are the names PostgreSQL gave version 1's CHECK constraints
	// on state and attempt, which version 5 drops.
	StateCheck, AttemptCheck string
	// Events is the key's history table, "schema"."<table>_events" (HistoryTableName), and the
	// rest its indexes (version 6).
	Events, EventsKeyIndex, EventsProviderIndex, EventsAtIndex string
}

// Migrations returns the migrations rendered for m's table, in version order: the SQL to review
// or to hand to a migration tool of your own.
func (m *Migrator) Migrations() ([]Migration, error) {
	schema, table := m.schema, m.table
	vars := migrationVars{
		Table:               pgx.Identifier{schema, table}.Sanitize(),
		Schema:              pgx.Identifier{schema}.Sanitize(),
		ExpiresIndex:        pgx.Identifier{table + "_expires_at_idx"}.Sanitize(),
		StateCheck:          pgx.Identifier{autoConstraintName(table, "state", "check")}.Sanitize(),
		AttemptCheck:        pgx.Identifier{autoConstraintName(table, "attempt", "check")}.Sanitize(),
		Events:              pgx.Identifier{schema, HistoryTableName(table)}.Sanitize(),
		EventsKeyIndex:      pgx.Identifier{companionName(table, "_events_key_idx")}.Sanitize(),
		EventsProviderIndex: pgx.Identifier{companionName(table, "_events_provider_idx")}.Sanitize(),
		EventsAtIndex:       pgx.Identifier{companionName(table, "_events_at_idx")}.Sanitize(),
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

// maxIdentifierBytes is the longest name PostgreSQL keeps (NAMEDATALEN - 1); it cuts longer
// names short.
const maxIdentifierBytes = 63

// MaxTableBytes is the longest key table name a Store and a Migrator take. PostgreSQL cuts a
// name to 63 bytes, and the table has companions named after it: its migration log
// (<table>_migrations) and, until migration 4 drops it, its expiry index
// (<table>_expires_at_idx). With a longer name two of them would be cut to one name.
const MaxTableBytes = 61

// checkTable refuses a key table name that PostgreSQL would cut to a name it already uses
// (MaxTableBytes).
func checkTable(table string) error {
	if len(table) > MaxTableBytes {
		return fmt.Errorf("idem: table name %q is %d bytes; at most %d: PostgreSQL keeps 63 bytes of a name, and %s_migrations and %s_expires_at_idx must stay distinct", table, len(table), MaxTableBytes, table, table)
	}
	return nil
}

// HistoryTableName is the name of the history table beside the key table named table:
// "<table>_events", or, when that is longer than PostgreSQL keeps, the table's name cut short
// and told apart by a digest of the whole (companionName).
func HistoryTableName(table string) string { return companionName(table, "_events") }

// companionName is table+suffix, the name of something that belongs to the key table; when
// that is over 63 bytes, the table's name is cut to fit and followed by 8 hex digits of its
// SHA-256, so two long table names that share a prefix still get distinct companions.
func companionName(table, suffix string) string {
	if len(table)+len(suffix) <= maxIdentifierBytes {
		return table + suffix
	}
	sum := sha256.Sum256([]byte(table))
	return clipUTF8(table, maxIdentifierBytes-len(suffix)-9) + "_" + hex.EncodeToString(sum[:4]) + suffix
}

// autoConstraintName is the name PostgreSQL gives a constraint declared without one on column
// of table (its makeObjectName): table_column_label, where a name over 63 bytes loses bytes
// from the longer of table and column first, each cut at a character boundary. The table's name
// is itself as PostgreSQL stored it: cut to 63 bytes.
func autoConstraintName(table, column, label string) string {
	table = clipUTF8(table, maxIdentifierBytes)
	avail := maxIdentifierBytes - len(label) - 2
	t, c := len(table), len(column)
	for t+c > avail {
		if t > c {
			t--
		} else {
			c--
		}
	}
	return clipUTF8(table, t) + "_" + clipUTF8(column, c) + "_" + label
}

// clipUTF8 is the longest prefix of s of at most n bytes that ends at a character boundary
// (PostgreSQL's pg_mbcliplen in a UTF-8 database).
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func renderMigration(file string, vars migrationVars) (string, error) {
	return renderEmbedded(migrationFS, file, vars)
}

// renderEmbedded is the template in file of fsys executed with data; a key data lacks is an
// error.
func renderEmbedded(fsys embed.FS, file string, data any) (string, error) {
	src, err := fsys.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("idem: %s: %w", file, err)
	}
	t, err := template.New(file).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return "", fmt.Errorf("idem: %s: %w", file, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("idem: %s: %w", file, err)
	}
	return b.String(), nil
}

// MigrateResult tells which versions were applied (DirectionUp) or reverted (DirectionDown)
// by this call, or with MigrateOpts.DryRun would be.
type MigrateResult struct {
	Direction Direction
	Versions  []Migration
}

// Migrate applies (DirectionUp) or reverts (DirectionDown) migrations in one transaction under
// an advisory lock named after the table, so concurrent calls (several replicas starting at
// once) run each migration once; running it again is a no-op. Applied versions are recorded in
// <table>_migrations next to the key table. The schema is created when it does not exist.
func (m *Migrator) Migrate(ctx context.Context, dir Direction, opts *MigrateOpts) (*MigrateResult, error) {
	if dir != DirectionUp && dir != DirectionDown {
		return nil, fmt.Errorf("idem: Migrate: direction %d is neither DirectionUp nor DirectionDown", int(dir))
	}
	var o MigrateOpts
	if opts != nil {
		o = *opts
	}
	ms, err := m.Migrations()
	if err != nil {
		return nil, err
	}
	if dir == DirectionDown {
		slices.Reverse(ms)
	}
	res := &MigrateResult{Direction: dir}
	err = m.inTx(ctx, func(tx pgx.Tx, versions string, applied map[int]bool) error {
		for _, mg := range ms {
			if applied[mg.Version] == (dir == DirectionUp) {
				continue
			}
			if o.MaxSteps > 0 && len(res.Versions) == o.MaxSteps {
				break
			}
			res.Versions = append(res.Versions, mg)
			if o.DryRun {
				continue
			}
			if err := m.step(ctx, tx, dir, versions, mg); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// step runs one migration in dir and records it.
func (m *Migrator) step(ctx context.Context, tx pgx.Tx, dir Direction, versions string, mg Migration) error {
	sql, record, what := mg.Up, "INSERT INTO "+versions+" (version, name) VALUES ($1, $2)", "up"
	args := []any{mg.Version, mg.Name}
	if dir == DirectionDown {
		sql, record, what = mg.Down, "DELETE FROM "+versions+" WHERE version = $1", "down"
		args = args[:1]
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("idem: migration %d (%s) %s: %w", mg.Version, mg.Name, what, err)
	}
	if _, err := tx.Exec(ctx, record, args...); err != nil {
		return fmt.Errorf("idem: record migration %d %s: %w", mg.Version, what, err)
	}
	return nil
}

// inTx runs fn in one transaction that holds an advisory lock named after the table, so
// concurrent Migrate calls (several replicas starting at once) apply each migration once.
func (m *Migrator) inTx(ctx context.Context, fn func(tx pgx.Tx, versions string, applied map[int]bool) error) error {
	db, schema, table := m.db, m.schema, m.table
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
