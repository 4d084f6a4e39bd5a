-- Leave a tenth of every page of the key table free (fillfactor 90): in lease mode the claim
-- inserts the key's row and the completion updates it moments later, and PostgreSQL can make that
-- update HOT (no new index entries, less WAL) only when the row's page has room for the new
-- version. With full pages a share of completions found none and wrote the row elsewhere, with a
-- new entry in each index. The setting applies to pages filled from now on; existing rows stay
-- where they are. It takes a SHARE UPDATE EXCLUSIVE lock, which blocks neither reads nor writes,
-- and setting it again changes nothing.
ALTER TABLE {{.Table}} SET (fillfactor = 90);
