"""Delivery: the push port, the outbox, sending, publishing, the mailer and SMTP."""
