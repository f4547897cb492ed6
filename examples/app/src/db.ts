// The shop's own table, in Drizzle. The app creates it itself (a real app would use drizzle-kit).
import { integer, pgTable, text, timestamp } from "drizzle-orm/pg-core";

export const orders = pgTable("orders", {
  id: text("id").primaryKey(),
  customerId: text("customer_id").notNull(),
  email: text("email").notNull(),
  totalCents: integer("total_cents").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});

export const CREATE_ORDERS = `
  CREATE TABLE IF NOT EXISTS orders (
    id text PRIMARY KEY,
    customer_id text NOT NULL,
    email text NOT NULL,
    total_cents integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
  )`;
