-- The example's business table. sqlc reads it to type the queries (sqlc.yaml); the example
-- creates it at start (schema.go embeds this file).
CREATE TABLE IF NOT EXISTS orders (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item     text   NOT NULL,
    quantity int    NOT NULL CHECK (quantity > 0)
);
