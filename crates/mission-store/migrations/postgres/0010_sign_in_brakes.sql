-- The brakes on guessing at sign-in, shared by replicas (one process keeps them in memory):
-- failures per address, user code and account, each failure past the free ones making the key
-- wait (`until`); and new device codes per address in a window (`count` since `window_start`).
CREATE TABLE sign_in_brakes (
    key          TEXT COLLATE "C" PRIMARY KEY,
    count        BIGINT NOT NULL,
    window_start BIGINT NOT NULL,
    until        BIGINT NOT NULL
);
