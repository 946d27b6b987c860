"""Subscriptions: the one service for web, chat and CLI; signed tokens; throttles."""
