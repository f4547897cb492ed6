-- SHA-1 of a byte string, for the version-5 idempotency UUID (pgcrypto is not assumed).
CREATE OR REPLACE FUNCTION __SCHEMA__.sha1_bytes(p_data BYTEA) RETURNS BYTEA
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  m32 CONSTANT BIGINT := 4294967295;
  h BIGINT[] := ARRAY[1732584193, 4023233417, 2562383102, 271733878, 3285377520]::BIGINT[];
  msg BYTEA;
  w BIGINT[];
  a BIGINT; b BIGINT; c BIGINT; d BIGINT; e BIGINT; f BIGINT; k BIGINT; t BIGINT;
  base INTEGER;
BEGIN
  msg := p_data || '\x80'::BYTEA;
  WHILE octet_length(msg) % 64 <> 56 LOOP
    msg := msg || '\x00'::BYTEA;
  END LOOP;
  msg := msg || int8send(octet_length(p_data)::BIGINT * 8);
  FOR chunk IN 0 .. octet_length(msg) / 64 - 1 LOOP
    base := chunk * 64;
    w := array_fill(0::BIGINT, ARRAY[80]);
    FOR i IN 0 .. 15 LOOP
      w[i + 1] := (get_byte(msg, base + i * 4)::BIGINT << 24) | (get_byte(msg, base + i * 4 + 1)::BIGINT << 16)
                | (get_byte(msg, base + i * 4 + 2)::BIGINT << 8) | get_byte(msg, base + i * 4 + 3)::BIGINT;
    END LOOP;
    FOR i IN 16 .. 79 LOOP
      t := w[i - 2] # w[i - 7] # w[i - 13] # w[i - 15];
      w[i + 1] := ((t << 1) | (t >> 31)) & m32;
    END LOOP;
    a := h[1]; b := h[2]; c := h[3]; d := h[4]; e := h[5];
    FOR i IN 0 .. 79 LOOP
      IF i < 20 THEN
        f := (b & c) | ((~b) & d); k := 1518500249;
      ELSIF i < 40 THEN
        f := b # c # d; k := 1859775393;
      ELSIF i < 60 THEN
        f := (b & c) | (b & d) | (c & d); k := 2400959708;
      ELSE
        f := b # c # d; k := 3395469782;
      END IF;
      t := ((((a << 5) | (a >> 27)) & m32) + (f & m32) + e + k + w[i + 1]) & m32;
      e := d; d := c; c := ((b << 30) | (b >> 2)) & m32; b := a; a := t;
    END LOOP;
    h[1] := (h[1] + a) & m32; h[2] := (h[2] + b) & m32; h[3] := (h[3] + c) & m32;
    h[4] := (h[4] + d) & m32; h[5] := (h[5] + e) & m32;
  END LOOP;
  RETURN substring(int8send(h[1]) FROM 5) || substring(int8send(h[2]) FROM 5) || substring(int8send(h[3]) FROM 5)
      || substring(int8send(h[4]) FROM 5) || substring(int8send(h[5]) FROM 5);
END
$fn$;
