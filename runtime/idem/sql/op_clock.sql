-- Store.KeyStats, first: the database's clock, which the counts compare the rows' times with.
SELECT statement_timestamp()
