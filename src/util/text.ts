/**
 * Whether `s` has no lone surrogate (String#isWellFormed, ES2024; the project's lib is ES2023). UTF-8 has no
 * bytes for a lone surrogate: a string with one is written with U+FFFD in its place, so two distinct keys
 * would become one.
 */
export function isWellFormed(s: string): boolean {
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}
