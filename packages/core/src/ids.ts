// Message ids travel as decimal strings (bigint in Postgres). Ordering them needs no BigInt: a
// shorter string is a smaller number, and equal lengths compare as text.

/** Compares two message ids given as decimal strings without leading zeros. */
export function compareIds(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}
