package payments

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestInstancesStartedTogetherOnAnEmptySchema: several example servers started at the same
// instant on an empty schema all come up; the runtime's, the example's and River's tables are
// migrated once between them.
func TestInstancesStartedTogetherOnAnEmptySchema(t *testing.T) {
	t.Parallel()
	const instances = 4
	// Each instance holds a pool (pgxpool's default size) and the migration lock's connection.
	schema := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true, MaxConns: 2 + instances*6})
	u, err := url.Parse(schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema.Name)
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	logs := make([]*syncBuffer, instances)
	errs := make([]chan error, instances)
	start := make(chan struct{})
	for i := range instances {
		logs[i], errs[i] = &syncBuffer{}, make(chan error, 1)
		go func() {
			<-start
			errs[i] <- run(ctx, []string{"-addr", "127.0.0.1:0", "-database-url", u.String()}, logs[i])
		}()
	}
	close(start)

	deadline := time.After(90 * time.Second)
	for i := range instances {
		for !strings.Contains(logs[i].String(), "msg=listening") {
			select {
			case err := <-errs[i]:
				t.Fatalf("instance %d of %d started together on an empty schema exited: %v\nits log:\n%s", i+1, instances, err, logs[i])
			case <-deadline:
				t.Fatalf("instance %d of %d did not listen within 90s of starting together; its log:\n%s", i+1, instances, logs[i])
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	stop()
	for i := range instances {
		select {
		case err := <-errs[i]:
			if err != nil {
				t.Errorf("instance %d: shut down with %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("instance %d did not shut down within 30s of its context ending", i+1)
		}
	}

	count := func(sql string) int {
		t.Helper()
		var n int
		if err := schema.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	// Each migration applied once: River records each version once (its primary key), and so
	// does the runtime.
	river := count("SELECT count(*) FROM river_migration")
	riverDistinct := count("SELECT count(DISTINCT version) FROM river_migration")
	idem := count("SELECT count(*) FROM " + pgx.Identifier{schema.Name, schema.Table + "_migrations"}.Sanitize())
	applied := 0
	for i := range instances {
		applied += strings.Count(logs[i].String(), "Applied migration")
	}
	t.Logf("%d instances started together: River's migrations recorded %d (%d distinct), applied %d times in all the logs; the runtime's recorded %d",
		instances, river, riverDistinct, applied, idem)
	if river == 0 || river != riverDistinct || applied != river {
		t.Errorf("River's migrations: %d recorded, %d distinct, %d applied across the instances' logs; want each applied once", river, riverDistinct, applied)
	}
	if idem == 0 {
		t.Error("the runtime's migrations were not recorded")
	}
	for _, table := range []string{"payments", "payouts", schema.Table} {
		if n := count(fmt.Sprintf("SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND tablename = '%s'", schema.Name, table)); n != 1 {
			t.Errorf("table %s: %d in schema %s, want 1", table, n, schema.Name)
		}
	}
}
