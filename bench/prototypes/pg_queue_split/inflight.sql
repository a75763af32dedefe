-- drain with deliveries in flight: claims of 128, results written four claims later
-- (about 512 leased at a time, as outboxd's default max_in_flight keeps); the claim and
-- the results are current.sql's (claim_batch, record_batch)
DROP PROCEDURE IF EXISTS drain(int);
CREATE OR REPLACE PROCEDURE drain(INOUT total int) LANGUAGE plpgsql AS $$
DECLARE ids text[]; q1 text[]; q2 text[]; q3 text[]; q4 text[]; done_ids text[];
BEGIN
  LOOP
    ids := claim_batch(128);
    COMMIT;
    done_ids := q4; q4 := q3; q3 := q2; q2 := q1; q1 := ids;
    EXIT WHEN ids IS NULL AND done_ids IS NULL AND q4 IS NULL AND q3 IS NULL AND q2 IS NULL;
    CONTINUE WHEN done_ids IS NULL;
    total := total + array_length(done_ids, 1);
    PERFORM record_batch(done_ids);
    COMMIT;
  END LOOP;
END $$;
