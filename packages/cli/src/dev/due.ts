// Scheduled messages, locally (docs/guide/producing.md#scheduled-delivery): `sqlstreams dev` reads each
// stream's earliest due time with the groups' progress and wakes the stream's groups at that time,
// so a scheduled message is delivered when it is due rather than at the group's next scheduled
// poll. (Deployed, the next scheduled poll of any group of the stream moves it.)

/** One timer per stream, armed for the stream's earliest due time. */
export class DueWakes {
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();

  constructor(private readonly wake: (stream: string) => void) {}

  /** Arms (or re-arms) the stream's timer for `due`; null clears it. */
  arm(stream: string, due: Date | null): void {
    const current = this.timers.get(stream);
    const at = due === null ? null : due.getTime();
    if (current !== undefined && current.at === at) return;
    if (current !== undefined) clearTimeout(current.timer);
    this.timers.delete(stream);
    if (at === null) return;
    const timer = setTimeout(() => {
      this.timers.delete(stream);
      this.wake(stream);
    }, Math.max(0, at - Date.now()) + 5);
    timer.unref();
    this.timers.set(stream, { at, timer });
  }

  stop(): void {
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}
